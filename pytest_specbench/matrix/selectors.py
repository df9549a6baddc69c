"""The matrix's top-level ``exclude:`` and ``include:`` lists (GitHub Actions' convention): maps
over axis values keyed by the axis names. An exclude entry removes the cells it matches; an
include entry adds or overrides per-group settings (``engine_args``, ``env``, ``hooks``) of the
engine groups it matches, without renaming the method. Parsed against the matrix's cells, so
an unknown axis, a value no cell has, or an entry matching nothing is an error naming the entry
and what is valid. No pytest, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .checks import Ctx, did_you_mean
from .list_args import one_list_value

# axis name in exclude/include -> its key in Cell.extra (the per-kind axes)
EXTRA_AXES = {
    "request_rate": "request_rate",
    "scenario": "scenario",
    "category": "category",
    "temperature": "temperature",
    "speed": "speed",
    "enable_thinking": "thinking",
}
AXES = ("method", "tp", "workload", "concurrency", "context_tokens", "output_tokens", *EXTRA_AXES)
GROUP_AXES = ("method", "tp")  # what one engine start is: include entries match on these
INCLUDE_SETS = ("engine_args", "env", "hooks")
NO_CONTEXT_AXIS = ("agentic", "categories", "trace")  # prompts from elsewhere (Cell.params)


def cell_axes(cell: Any) -> dict[str, tuple[Any, ...]]:
    """A cell's value(s) on each axis it has: ``method`` is its name and, for a setting of a
    sweep, the sweep's name too; a greedy cell's temperature is 0."""
    m = cell.method
    out: dict[str, tuple[Any, ...]] = {
        "method": (m.name, m.sweep) if m.sweep else (m.name,),
        "tp": (cell.tp,),
        "workload": (cell.workload.name,),
        "concurrency": (cell.concurrency,),
    }
    kind = cell.workload.kind
    if kind not in NO_CONTEXT_AXIS:
        out["context_tokens"] = (cell.context_tokens,)
    if kind != "trace":  # a trace's output lengths are its own
        out["output_tokens"] = (cell.output_tokens,)
    extra = dict(cell.extra)
    for axis, k in EXTRA_AXES.items():
        if k in extra:
            v = extra[k]
            out[axis] = (Path(str(v)).stem if k == "scenario" else v,)
    if kind in ("throughput", "ttft", "long_context", "agentic", "categories"):
        out.setdefault("temperature", (0.0,))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


@dataclass(frozen=True)
class Selector:
    """One entry's conditions: on each named axis, the values any of which matches."""

    where: str  # "exclude[0]": the entry, for messages
    axes: tuple[tuple[str, tuple[Any, ...]], ...]

    def matches(self, cell: Any) -> bool:
        have = cell_axes(cell)
        return all(
            axis in have and any(_same(v, x) for v in vals for x in have[axis]) for axis, vals in self.axes
        )

    def matches_group(self, method: Any, tp: int) -> bool:
        have = {"method": (method.name, method.sweep) if method.sweep else (method.name,), "tp": (tp,)}
        return all(any(_same(v, x) for v in vals for x in have[axis]) for axis, vals in self.axes)


@dataclass(frozen=True)
class Override:
    """An include entry: the groups it matches and what it sets on them (merged over the
    method's own, later entries over earlier ones)."""

    selector: Selector
    engine_args: tuple[tuple[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    hooks: tuple[tuple[str, str], ...] = ()


def drops_group(exclude: tuple[Selector, ...], method: Any, tp: int) -> bool:
    """Whether an exclude entry naming only method and TP removes this engine group whole."""
    return any(all(a in GROUP_AXES for a, _ in s.axes) and s.matches_group(method, tp) for s in exclude)


def apply_includes(method: Any, tp: int, include: tuple[Override, ...]) -> Any:
    """``method`` with the engine_args, env and hooks of every include entry matching it at
    ``tp`` merged over its own, in the file's order (the name is unchanged)."""
    hits = [o for o in include if o.selector.matches_group(method, tp)]
    if not hits:
        return method
    args, env, hooks = dict(method.engine_args), dict(method.env), dict(method.hooks)
    for o in hits:
        args.update(o.engine_args)
        env.update(o.env)
        hooks.update(o.hooks)
    return replace(
        method,
        engine_args=tuple(sorted(args.items())),
        env=tuple(sorted(env.items())),
        hooks=tuple(sorted(hooks.items())),
    )


def _values(cx: Ctx, where: str, axis: str, raw: Any, known: list[Any]) -> tuple[Any, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise cx.err(
            f"{where}.{axis}", "an empty list: give one value, or a list of values any of which matches"
        )
    for v in items:
        if isinstance(v, (dict, list)) or v is None or not any(_same(v, k) for k in known):
            shown = ", ".join(str(k) for k in known)
            hint = did_you_mean(v, [str(k) for k in known]) if isinstance(v, str) else ""
            raise cx.err(f"{where}.{axis}", f"{v!r} is not a value of this axis{hint}; its values: {shown}")
    return tuple(items)


def _known(cells: list[Any]) -> dict[str, list[Any]]:
    known: dict[str, list[Any]] = {}
    for c in cells:
        for axis, vals in cell_axes(c).items():
            seen = known.setdefault(axis, [])
            for v in vals:
                if not any(type(v) is type(s) and _same(v, s) for s in seen):
                    seen.append(v)
    for vals in known.values():
        vals.sort(key=lambda x: (str(type(x)), x))
    return known


def _selector(
    cx: Ctx, where: str, raw: Any, allowed: tuple[str, ...], known: dict[str, list[Any]]
) -> Selector:
    if not isinstance(raw, dict) or not raw:
        raise cx.err(
            where, f"expected a mapping of axis -> value, e.g. {{method: ngram, concurrency: 4}}; got {raw!r}"
        )
    axes = []
    for k, v in raw.items():
        if k in INCLUDE_SETS and allowed is not AXES:
            continue
        if k not in allowed:
            hint = did_you_mean(k, (*allowed, *INCLUDE_SETS) if allowed is GROUP_AXES else allowed)
            raise cx.err(f"{where}.{k}", f"unknown axis{hint}; axes: {', '.join(allowed)}")
        axes.append((str(k), _values(cx, where, str(k), v, known.get(str(k), []))))
    return Selector(where, tuple(axes))


def excludes(cx: Ctx, raw: Any, cells: list[Any]) -> tuple[Selector, ...]:
    """The ``exclude:`` list; each entry must match at least one cell (an entry that matches
    nothing is a typo or a stale line: refused, before anything runs)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise cx.err(
            "exclude",
            f"expected a list of maps over axis values, e.g. [{{method: ngram, tp: 8}}]; got {raw!r}",
        )
    known = _known(cells)
    out = []
    for i, entry in enumerate(raw):
        s = _selector(cx, f"exclude[{i}]", entry, AXES, known)
        if not any(s.matches(c) for c in cells):
            raise cx.err(
                s.where,
                f"matches no cell ({_text(s)}): each value exists on its axis, but no cell has them "
                "together; remove the entry or fix its values",
            )
        out.append(s)
    return tuple(out)


def includes(cx: Ctx, raw: Any, cells: list[Any], excluded: tuple[Selector, ...]) -> tuple[Override, ...]:
    """The ``include:`` list: per-group settings for the engine groups (method, tp) each entry
    matches among the cells left after ``exclude``; an entry matching none of them is refused
    (it would add a combination, which the axes and ``exclude`` already say)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise cx.err(
            "include",
            "expected a list of maps, e.g. [{tp: 1, engine_args: {mem_fraction_static: 0.8}}]; "
            f"got {raw!r}",
        )
    known = _known(cells)
    kept = [c for c in cells if not any(s.matches(c) for s in excluded)]
    out = []
    for i, entry in enumerate(raw):
        where = f"include[{i}]"
        if isinstance(entry, dict):
            for k in entry:
                if k in AXES and k not in GROUP_AXES:
                    raise cx.err(
                        f"{where}.{k}",
                        "an include entry sets engine_args, env and hooks, which are per engine group "
                        f"(one method at one TP): match on {' and '.join(GROUP_AXES)} only",
                    )
        s = _selector(cx, where, entry, GROUP_AXES, known)
        sets = {k: entry[k] for k in INCLUDE_SETS if k in entry}
        if not sets:
            raise cx.err(where, f"sets nothing; give {', '.join(INCLUDE_SETS)} for the groups it matches")
        hit = [c for c in kept if s.matches(c)]
        if not hit:
            why = "no cell" if not any(s.matches(c) for c in cells) else "only excluded cells"
            raise cx.err(
                where,
                f"matches {why} ({_text(s)}): an include entry adds settings to existing engine groups; "
                "new combinations come from the axes",
            )
        args = sets.get("engine_args") or {}
        if not isinstance(args, dict):
            raise cx.err(
                f"{where}.engine_args", f"expected a mapping of engine keyword arguments; got {args!r}"
            )
        swept = {k for c in hit for k, _ in c.method.setting}
        for k in args:
            if k in swept:
                raise cx.err(
                    f"{where}.engine_args.{k}",
                    "is swept by a method this entry matches; its settings are named by it, so an "
                    "include cannot change it (sweep other values in the method, exclude the rest)",
                )
        args = _one_values(cx, f"{where}.engine_args", args)
        env = _env(cx, f"{where}.env", sets.get("env") or {})
        out.append(
            Override(
                s,
                engine_args=tuple(sorted((str(k), v) for k, v in args.items())),
                env=env,
                hooks=group_hooks(cx, f"{where}.hooks", sets["hooks"]) if "hooks" in sets else (),
            )
        )
    return tuple(out)


def _one_values(cx: Ctx, key: str, args: dict[str, Any]) -> dict[str, Any]:
    """engine_args of an include entry: one value each (a list only as an argument SGLang takes
    as a list, or nested once); an include does not sweep."""
    out = {}
    for k, v in args.items():
        if isinstance(v, list):
            if not one_list_value("engine_args", str(k), v):
                raise cx.err(
                    f"{key}.{k}",
                    f"a list sweeps in a method, not in an include entry; give one value (a list "
                    f"argument nested once: [{v!r}])",
                )
            v = v[0] if len(v) == 1 and isinstance(v[0], list) else v
        out[str(k)] = _freeze(v)
    return out


def _freeze(value: Any) -> Any:
    """cells.freeze (cells imports this module, so it cannot be imported here)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _env(cx: Ctx, key: str, env: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(env, dict):
        raise cx.err(key, f"expected a mapping of environment variables; got {env!r}")
    for k, v in env.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise cx.err(
                f"{key}.{k}", f'{v!r} is not a variable\'s value: give a string or a number (quoted: "1")'
            )
    return tuple(sorted((str(k), str(v)) for k, v in env.items()))


GROUP_HOOKS = ("before_group", "after_group")
RUN_HOOKS = ("before_run", "after_run")


def group_hooks(cx: Ctx, key: str, raw: Any) -> tuple[tuple[str, str], ...]:
    """``hooks: {before_group: CMD, after_group: CMD}``: shell commands around an engine group."""
    d = cx.mapping(raw, key, GROUP_HOOKS)
    return tuple((k, cx.string(d[k], f"{key}.{k}")) for k in GROUP_HOOKS if d.get(k) is not None)


def run_hooks(cx: Ctx, raw: Any) -> tuple[tuple[str, str], ...]:
    """Top-level ``hooks: {before_run: CMD, after_run: CMD}``: shell commands around the run."""
    if raw is None:
        return ()
    d = cx.mapping(raw, "hooks", RUN_HOOKS)
    return tuple((k, cx.string(d[k], f"hooks.{k}")) for k in RUN_HOOKS if d.get(k) is not None)


def _text(s: Selector) -> str:
    return ", ".join(f"{a}: {'|'.join(str(v) for v in vals)}" for a, vals in s.axes)
