"""The matrix's top-level ``exclude:`` and ``include:`` lists (GitHub Actions' convention): maps
over axis values keyed by the axis names. An exclude entry removes the cells it matches; an
include entry adds or overrides per-group settings (``engine_args``, ``env``, ``hooks``) of the
engine groups it matches, without renaming the method, or adds the group it names (one method
at one more TP size). Parsed against the matrix's cells, so an unknown axis, a value no cell
has, or an entry matching nothing it could add to is an error naming the entry and what is
valid. No pytest, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .checks import Ctx, did_you_mean
from .list_args import one_list_value
from .workload_kinds import kind_of

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
    kind = kind_of(cell.workload.kind)
    if kind.exact:  # others' prompts come from elsewhere (Cell.params)
        out["context_tokens"] = (cell.context_tokens,)
    if not kind.replay:  # a trace's output lengths are its own
        out["output_tokens"] = (cell.output_tokens,)
    extra = dict(cell.extra)
    for axis, k in EXTRA_AXES.items():
        if k in extra:
            v = extra[k]
            out[axis] = (Path(str(v)).stem if k == "scenario" else v,)
    if not kind.replay:
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


def _values(cx: Ctx, where: str, axis: str, raw: Any, known: list[Any], tail: str = "") -> tuple[Any, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise cx.err(
            f"{where}.{axis}", "an empty list: give one value, or a list of values any of which matches"
        )
    for v in items:
        if isinstance(v, (dict, list)) or v is None or not any(_same(v, k) for k in known):
            shown = ", ".join(str(k) for k in known)
            hint = did_you_mean(v, [str(k) for k in known]) if isinstance(v, str) else ""
            raise cx.err(
                f"{where}.{axis}", f"{v!r} is not a value of this axis{hint}; its values: {shown}{tail}"
            )
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
        tail = (
            " (an include entry naming one method and one TP size adds that method at that TP)"
            if allowed is GROUP_AXES and k == "tp"
            else ""
        )
        axes.append((str(k), _values(cx, where, str(k), v, known.get(str(k), []), tail)))
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


def includes(
    cx: Ctx,
    raw: Any,
    cells: list[Any],
    excluded: tuple[Selector, ...],
    max_tp: dict[str, int | None] | None = None,
) -> tuple[tuple[Override, ...], tuple[tuple[str, int], ...]]:
    """The ``include:`` list, as GitHub Actions reads it where a combination is an engine group
    (one method at one TP size): an entry whose values match groups among the cells left after
    ``exclude`` adds its settings to each of them; an entry that matches none, naming one method
    and one TP size it does not run at, adds that combination: the method runs at that TP too
    (every shape its workloads give it), with the entry's settings. Returns the settings
    (Override per entry) and the (method, tp) combinations added. What GitHub Actions would do
    and a matrix cannot (a combination of only some axes, an excluded one added back) is refused
    naming the difference and what to write instead. ``max_tp``: backend -> the most TP it runs
    (None: any; the plugin gives the engines' registry): an added combination its method's
    backend cannot run is refused here, before any engine starts, not skipped at run time."""
    if raw is None:
        return (), ()
    if not isinstance(raw, list):
        raise cx.err(
            "include",
            "expected a list of maps, e.g. [{tp: 1, engine_args: {mem_fraction_static: 0.8}}]; "
            f"got {raw!r}",
        )
    known = _known(cells)
    kept = [c for c in cells if not any(s.matches(c) for s in excluded)]
    out = []
    added: list[tuple[str, int]] = []
    for i, entry in enumerate(raw):
        where = f"include[{i}]"
        if isinstance(entry, dict):
            for k in entry:
                if k in AXES and k not in GROUP_AXES:
                    raise cx.err(
                        f"{where}.{k}",
                        "an include entry sets engine_args, env and hooks, which are per engine group "
                        f"(one method at one TP): match on {' and '.join(GROUP_AXES)} only; unlike GitHub "
                        "Actions, an include entry does not add workload shapes: give them as values on "
                        "the workload's axes (and exclude the ones not wanted)",
                    )
        new = _addition(cx, where, entry, cells)
        if new is not None and new in added:
            first = raw.index(next(e for e in raw if _addition(cx, where, e, cells) == new))
            raise cx.err(
                where,
                f"adds method {new[0]} at TP {new[1]} again (include[{first}] adds it): give all its "
                "settings in that entry (include entries match the matrix's own groups, as in GitHub "
                "Actions, not the ones other entries add)",
            )
        if new is not None:
            s = Selector(where, (("method", (new[0],)), ("tp", (new[1],))))
            hit = [c for c in cells if any(_same(new[0], x) for x in cell_axes(c)["method"])]
            _check_tp(cx, where, new, hit, max_tp or {})
            added.append(new)
        else:
            s = _selector(cx, where, entry, GROUP_AXES, known)
            hit = [c for c in kept if s.matches(c)]
            if not hit:
                raise cx.err(where, _no_group(s, cells))
        sets = {k: entry[k] for k in INCLUDE_SETS if k in entry}
        if not sets and new is None:
            raise cx.err(where, f"sets nothing; give {', '.join(INCLUDE_SETS)} for the groups it matches")
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
    return tuple(out), tuple(added)


def _one(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _addition(cx: Ctx, where: str, entry: Any, cells: list[Any]) -> tuple[str, int] | None:
    """(method, tp) when ``entry`` names one method that has cells and one TP size at which
    no cell of it exists (excluded or not): the combination it adds; else None."""
    if not isinstance(entry, dict) or any(k not in (*GROUP_AXES, *INCLUDE_SETS) for k in entry):
        return None  # an unknown key: _selector names it
    m, tp = _one(entry.get("method")), _one(entry.get("tp"))
    if not isinstance(m, str) or isinstance(tp, bool) or not isinstance(tp, int):
        return None
    mine = [c for c in cells if any(_same(m, x) for x in cell_axes(c)["method"])]
    if not mine or any(c.tp == tp for c in mine):
        return None
    cx.pos_int(tp, f"{where}.tp")
    return m, tp


def _check_tp(
    cx: Ctx, where: str, new: tuple[str, int], hit: list[Any], max_tp: dict[str, int | None]
) -> None:
    """An added (method, tp) its method's backend cannot run (more TP than the backend's most):
    refused, naming the entry, the backend and its limit."""
    for backend in sorted({c.method.backend for c in hit}):
        limit = max_tp.get(backend)
        if limit is not None and new[1] > limit:
            sizes = sorted({c.tp for c in hit})
            raise cx.err(
                where,
                f"adds method {new[0]} at TP {new[1]}, but its backend {backend!r} runs at most TP={limit} "
                f"(it runs at TP {', '.join(map(str, sizes))} already): remove the entry, or give the method "
                "a multi-GPU backend such as sglang",
            )


def _no_group(s: Selector, cells: list[Any]) -> str:
    """Why an entry that adds nothing and matches no kept group is refused: what GitHub Actions
    would do with it, and what to write here."""
    if any(s.matches(c) for c in cells):
        return (
            f"matches only excluded cells ({_text(s)}): in GitHub Actions an include entry adds an excluded "
            "combination back; here exclude has the last word (it may have removed only some shapes of the "
            "group): narrow or remove the exclude entry"
        )
    return (
        f"matches no engine group ({_text(s)}): each value exists, but no method runs at that TP size; "
        "GitHub Actions would add a combination of only these keys, and a cell needs one method at one TP: "
        "name one method and one TP size ({method: NAME, tp: N}) to run that method at that TP too"
    )


def add_groups(methods: tuple[Any, ...], added: tuple[tuple[str, int], ...], tp: tuple[int, ...]) -> tuple:
    """``methods`` with each (method, tp) of ``added`` among its TP sizes (the method's own list,
    else the matrix's): the method's name, a sweep's name (every setting) or one setting's."""
    out = []
    for m in methods:
        sizes = list(m.tp or tp)
        for name, t in added:
            if name in (m.name, m.sweep) and t not in sizes:
                sizes.append(t)
        out.append(replace(m, tp=tuple(sizes)) if sizes != list(m.tp or tp) else m)
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
    """``hooks: {before_group: CMD, after_group: CMD, gpus: [0]}``: shell commands around an engine
    group; with ``gpus`` (NVML indices) only around the groups that lease one of them, which the
    schedule runs in one window (plugin/group_hooks.py), kept as ``("gpus", "0,3")``."""
    d = cx.mapping(raw, key, (*GROUP_HOOKS, "gpus"))
    out = tuple((k, cx.string(d[k], f"{key}.{k}")) for k in GROUP_HOOKS if d.get(k) is not None)
    if d.get("gpus") is None:
        return out
    gpus = d["gpus"] if isinstance(d["gpus"], list) else [d["gpus"]]
    if not gpus or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus):
        raise cx.err(f"{key}.gpus", f"expected GPU indices (NVML's, e.g. [0]); got {d['gpus']!r}")
    return (*out, ("gpus", ",".join(str(g) for g in sorted(set(gpus)))))


def run_hooks(cx: Ctx, raw: Any) -> tuple[tuple[str, str], ...]:
    """Top-level ``hooks: {before_run: CMD, after_run: CMD}``: shell commands around the run."""
    if raw is None:
        return ()
    d = cx.mapping(raw, "hooks", RUN_HOOKS)
    return tuple((k, cx.string(d[k], f"hooks.{k}")) for k in RUN_HOOKS if d.get(k) is not None)


def _text(s: Selector) -> str:
    return ", ".join(f"{a}: {'|'.join(str(v) for v in vals)}" for a, vals in s.axes)
