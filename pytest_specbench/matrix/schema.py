"""The matrix file's schema and its validation: YAML in (keys given twice refused), the frozen
objects of cells.py out. Every error names the file, the key path and what is allowed;
scenario and question files are checked now, not when a cell runs. No pytest, no heavy imports.

One function per section of the file (models, methods with their sweeps and endpoints) and the
loader, whose messages are the schema's documentation; the workloads section, with its key list,
axes and SLOs, is workload_schema.py; the checks all sections use are checks.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .accept_bound import check_expected_accept
from .algorithms import ALGORITHMS, algorithm, names
from .cells import (
    DEFAULT_BASELINE,
    LOAD_FORMATS,
    SWEEP_LABELS,
    WORKLOAD_KINDS,
    Cell,
    Matrix,
    Method,
    Model,
    freeze,
    setting_name,
)
from .checks import Ctx, MatrixError, did_you_mean, without_x_keys
from .compare import parse_compare
from .engine_args import check_matrix, unchecked_names
from .list_args import one_list_value
from .selectors import add_groups, excludes, group_hooks, includes, run_hooks
from .speculative import Speculative, refused_setting
from .tune import check_matches, parse_tune
from .workload_schema import fraction, workload
from .yaml_load import DuplicateKeyError, load_matrix_yaml

MODEL_KEYS = ("path", "tokenizer", "load_format", "context_length")
METHOD_KEYS = (
    "backend",
    "model",
    "speculative",
    "tp",
    "engine_args",
    "env",
    "labels",
    "url",
    "api",
    "api_key_env",
    "hooks",
    "tune",
    "starts",
)
MAX_STARTS = 8
ENDPOINT_BACKENDS = ("http",)  # backends that talk to an endpoint given by url:
APIS = ("sglang", "openai")
SPEC_KEYS = (
    "algorithm",
    "draft_model",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "max_ngram",
    "block_size",
    "simulate_accept_length",
    "simulate_accept_method",
    "expect_accept_length",
)
SIMULATE_METHODS = ("match-expected", "multinomial")  # SGLANG_SIMULATE_ACC_METHOD
MAX_FORCED_ACCEPT = 64.0
TOP_KEYS = (
    "models",
    "methods",
    "tp",
    "workloads",
    "baseline",
    "exclude",
    "include",
    "hooks",
    "compare",
    "engine_args_unchecked",
    "race",
)
RACE_KEYS = ("delta",)


def _race_delta(cx: Ctx, raw: Any) -> float | None:
    """``race: {delta: 0.03}``: the smallest difference worth a decision (deciding/selection.py)."""
    if raw is None:
        return None
    d = cx.mapping(raw, "race", RACE_KEYS)
    if d.get("delta") is None:
        return None
    return fraction(cx, d["delta"], "race.delta", "0.03 (3 %)")


def _model(cx: Ctx, name: str, raw: Any, base_dir: Path) -> Model:
    key = f"models.{name}"
    if isinstance(raw, str):
        raw = {"path": raw}
    d = cx.mapping(raw, key, MODEL_KEYS, required=("path",))
    path = cx.string(d["path"], f"{key}.path")
    # "./x" and "../x" are relative to the matrix file; a bare "org/name" may be a hub id
    if path.startswith(("./", "../")) or (
        not path.startswith("embedded:") and not Path(path).is_absolute() and (base_dir / path).exists()
    ):
        path = str((base_dir / path).resolve())
    tok = d.get("tokenizer")
    return Model(
        name=name,
        path=path,
        tokenizer=cx.string(tok, f"{key}.tokenizer") if tok is not None else None,
        load_format=cx.choice(d.get("load_format", "auto"), f"{key}.load_format", LOAD_FORMATS),
        context_length=(
            cx.pos_int(d["context_length"], f"{key}.context_length")
            if d.get("context_length") is not None
            else None
        ),
    )


SWEEP_KEYS = ("num_steps", "topk", "num_draft_tokens", "block_size", "max_ngram")


def _speculative(
    cx: Ctx, key: str, raw: Any, backend: str = "sglang"
) -> list[tuple[Speculative, tuple[tuple[str, Any], ...]]]:
    """The settings of a ``speculative:`` block: one per combination of the knobs given as lists
    (a sweep), each with the (knob, value) pairs that vary; refused combinations name the reason."""
    d = cx.mapping(raw, key, SPEC_KEYS, required=("algorithm",))
    algo = cx.string(d["algorithm"], f"{key}.algorithm")
    decl = algorithm(algo)
    if decl is not None and decl.checked:
        algo = decl.name
    elif not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", algo):
        raise cx.err(
            f"{key}.algorithm",
            f"{algo!r} is not an algorithm name; known: {', '.join(names())}, or any name SGLang "
            "knows or a plugin registers (letters, digits, _), passed to the engine as given",
        )
    checked = decl if decl is not None and decl.checked else None  # the matrix checks its settings
    kw: dict[str, Any] = {"algorithm": algo}
    axes: dict[str, tuple[Any, ...]] = {}
    for k in SWEEP_KEYS:
        if d.get(k) is None:
            continue
        if checked is not None and checked.knobs is not None and k not in checked.knobs:
            raise cx.err(f"{key}.{k}", f"algorithm {algo!r} takes {', '.join(checked.knobs)}; not {k}")
        axes[k] = cx.int_list(d[k], f"{key}.{k}")
    if d.get("simulate_accept_length") is not None:
        k = f"{key}.simulate_accept_length"
        if checked is not None and not checked.forced_accept:
            forced_ok = (n for n in names() if ALGORITHMS[n].forced_accept)
            raise cx.err(
                k,
                f"algorithm {algo!r} does not honour a forced accept length; forced acceptance "
                f"works with {', '.join(forced_ok)}",
            )
        raw_l = d["simulate_accept_length"]
        items = raw_l if isinstance(raw_l, list) else [raw_l]
        at = (lambda i: f"{k}[{i}]") if isinstance(raw_l, list) else (lambda i: k)
        for i, v in enumerate(items):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v < 1:
                raise cx.err(at(i), f"{v:g} is below 1: a verify step commits at least one token (give >= 1)")
        vals = tuple(
            cx.pos_number(v, at(i), "an accept length", MAX_FORCED_ACCEPT) for i, v in enumerate(items)
        )
        if not vals or len(set(vals)) != len(vals):
            raise cx.err(k, f"expected distinct accept lengths >= 1; got {items!r}")
        axes["simulate_accept_length"] = vals
    if d.get("simulate_accept_method") is not None:
        if "simulate_accept_length" not in axes:
            raise cx.err(f"{key}.simulate_accept_method", "only with simulate_accept_length")
        kw["simulate_accept_method"] = cx.choice(
            d["simulate_accept_method"], f"{key}.simulate_accept_method", SIMULATE_METHODS
        )
    if d.get("expect_accept_length") is not None:
        k = f"{key}.expect_accept_length"
        if "simulate_accept_length" in axes:
            raise cx.err(k, "not with simulate_accept_length: a forced accept length is what the engine does")
        v = d["expect_accept_length"]
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v < 1:
            raise cx.err(k, f"{v:g} is below 1: a verify step yields at least one token (give >= 1)")
        kw["expect_accept_length"] = cx.pos_number(v, k, "an accept length", MAX_FORCED_ACCEPT)
    if d.get("draft_model") is not None:
        kw["draft_model"] = cx.string(d["draft_model"], f"{key}.draft_model")
    if checked is not None and checked.needs_draft and "draft_model" not in kw:
        raise cx.err(f"{key}.draft_model", f"algorithm {algo!r} needs a draft_model (a name under models:)")
    varying = [k for k, v in axes.items() if len(v) > 1]
    out = []
    for combo in itertools.product(*axes.values()):
        setting = dict(zip(axes, combo, strict=True))
        why = refused_setting(algo, setting)
        if why:
            label = ", ".join(f"{k}={v}" for k, v in setting.items())
            raise cx.err(key, f"the setting {label} is refused: {why}")
        spec = Speculative(**{**kw, **setting})
        most = spec.max_tokens_per_step("hf" if backend == "hf" else "sglang")
        forced = spec.simulate_accept_length
        if forced is not None and most is not None and forced > most:
            raise cx.err(
                f"{key}.simulate_accept_length",
                f"{forced:g} tokens per verify step cannot be forced: this setting commits at most "
                f"{most} (raise num_steps / num_draft_tokens / block_size)",
            )
        # a forced accept length always labels the id (a3), even when only one is given
        named = [k for k in axes if k in varying or k == "simulate_accept_length"]
        out.append((spec, tuple((k, setting[k]) for k in named)))
    return out


# the registered backends' names, or name -> the most TP it runs (None: any), as the plugin gives
# them (engines' registry; the matrix never imports it)
Backends = tuple[str, ...] | Mapping[str, int | None]


def _method(
    cx: Ctx, name: str, raw: Any, models: dict[str, Model], backends: Backends | None
) -> list[Method]:
    """A method, or one per setting when its speculative knobs are lists (``name-s3-d4``)."""
    key = f"methods.{name}"
    d = cx.mapping(raw, key, METHOD_KEYS, required=("backend", "model"))
    backend = cx.string(d["backend"], f"{key}.backend")
    if backends is not None and backend not in backends:
        raise cx.err(
            f"{key}.backend", f"{backend!r} is not a registered backend; allowed: {', '.join(backends)}"
        )
    mname = cx.string(d["model"], f"{key}.model")
    if mname not in models:
        raise cx.err(
            f"{key}.model",
            f"{mname!r} is not defined under models:{did_you_mean(mname, models)}; "
            f"defined: {', '.join(models) or '(none)'}",
        )
    if "speculative" in d and d["speculative"] is None:
        raise cx.err(
            f"{key}.speculative",
            f"is empty; give {{algorithm: ...}} ({', '.join(names())}), "
            "or remove the key for autoregressive decoding",
        )
    settings = (
        _speculative(cx, f"{key}.speculative", d["speculative"], backend)
        if d.get("speculative") is not None
        else None
    )
    draft = None
    spec0 = settings[0][0] if settings else None
    if spec0 and spec0.draft_model:
        if spec0.draft_model not in models:
            raise cx.err(
                f"{key}.speculative.draft_model",
                f"{spec0.draft_model!r} is not defined under models:"
                f"{did_you_mean(spec0.draft_model, models)}; defined: {', '.join(models)}",
            )
        draft = models[spec0.draft_model]
    engine_args = d.get("engine_args") or {}
    if not isinstance(engine_args, dict):
        raise cx.err(
            f"{key}.engine_args", f"expected a mapping of engine keyword arguments; got {engine_args!r}"
        )
    engine_args = dict(engine_args)  # [[...]] values are unwrapped below, not in the caller's data
    env = d.get("env") or {}
    if not isinstance(env, dict):
        raise cx.err(f"{key}.env", f"expected a mapping of environment variables; got {env!r}")
    for k, v in env.items():  # a variable's value is text: a string or number, or a list of them
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, bool) or not isinstance(x, (str, int, float)):
                raise cx.err(
                    f"{key}.env.{k}",
                    f'{x!r} is not a variable\'s value: give a string or a number (quoted: "1", '
                    '"true"), or a list of them to sweep',
                )
    labels = d.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(v, str) and v and all(ch.isalnum() or ch in "-_." for ch in v) for v in labels.values()
    ):
        raise cx.err(
            f"{key}.labels",
            "expected a mapping of swept key -> id label (letters, digits, '-', '_', '.': -k selects ids "
            f"by them); got {labels!r}",
        )
    swept = _swept_args(cx, key, engine_args, env)
    unknown = sorted(set(labels) - {k for k, _ in swept} - set(SWEEP_LABELS))
    if unknown:
        raise cx.err(
            f"{key}.labels.{unknown[0]}",
            "labels a key that is not swept here; swept: " + (", ".join(k for k, _ in swept) or "(none)"),
        )
    url, api, key_env = _endpoint(cx, key, backend, d)
    base = Method(
        name=name,
        backend=backend,
        model=models[mname],
        speculative=spec0,
        draft_model=draft,
        tp=cx.int_list(d["tp"], f"{key}.tp") if d.get("tp") is not None else (),
        engine_args=freeze(engine_args),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
        url=url,
        api=api,
        api_key_env=key_env,
        hooks=group_hooks(cx, f"{key}.hooks", d["hooks"]) if d.get("hooks") is not None else (),
    )
    base = dataclasses.replace(base, labels=tuple(sorted((str(k), v) for k, v in labels.items())))
    spec_settings: list[tuple[Speculative | None, tuple[tuple[str, Any], ...]]] = (
        list(settings) if settings else [(None, ())]
    )
    forced = any(k == "simulate_accept_length" for _, v in spec_settings for k, _ in v)
    tune = parse_tune(cx, key, d.get("tune"), len(spec_settings) > 1 or bool(swept), forced)
    base = dataclasses.replace(base, tune=tune)  # racing: where the sweep is decided, what goes on
    if len(spec_settings) == 1 and not spec_settings[0][1] and not swept:
        check_expected_accept(cx, key, base, None)
        return [base]
    out = []
    arg_keys = [k for k, _ in swept]
    for (spec, varying), combo in itertools.product(spec_settings, itertools.product(*(v for _, v in swept))):
        args = dict(engine_args)
        envs = {str(k): str(v) for k, v in env.items() if not isinstance(v, list)}
        for (k, _), v in zip(swept, combo, strict=True):
            if k in env:
                envs[k] = str(v)
            else:
                args[k] = v
        setting = (*varying, *((k, v) for k, v in zip(arg_keys, combo, strict=True) if _varies(swept, k)))
        out.append(
            dataclasses.replace(
                base,
                name=setting_name(name, setting, base.labels),
                speculative=spec if settings else None,
                sweep=name,
                setting=setting,
                engine_args=freeze(args),
                env=tuple(sorted(envs.items())),
            )
        )
        check_expected_accept(cx, key, out[-1], out[-1].name)
    return out


# what SGLang 0.5.17 and the hf engine use where the matrix gives no value (planning/structure.py,
# planning/sglang_memory.py and engines/hf.py use the same)
def _varies(swept: list[tuple[str, tuple[Any, ...]]], key: str) -> bool:
    return len(dict(swept)[key]) > 1


def _swept_args(
    cx: Ctx, key: str, engine_args: dict[str, Any], env: dict[str, Any]
) -> list[tuple[str, tuple[Any, ...]]]:
    """The engine arguments and environment variables given as lists: (name, values), one engine
    group per combination. A list-valued argument given as one value is nested ([[1, 2, 4]])."""
    out = []
    for where, d in (("engine_args", engine_args), ("env", env)):
        for k, v in d.items():
            if not isinstance(v, list) or one_list_value(where, k, v):
                if where == "engine_args" and isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
                    engine_args[k] = v[0]  # [[1, 2, 4]]: the list itself, given as one value
                continue
            if not v:
                raise cx.err(f"{key}.{where}.{k}", "an empty list: give the values to sweep")
            vals = tuple(freeze(x) for x in v)
            if len({str(x) for x in vals}) != len(vals):  # 32 and "32" are one value to an engine
                raise cx.err(f"{key}.{where}.{k}", f"duplicate values in {v!r}")
            if k in engine_args and k in env:
                raise cx.err(f"{key}.{where}.{k}", "is both an engine argument and a variable")
            out.append((str(k), vals))
    return out


def _endpoint(
    cx: Ctx, key: str, backend: str, d: dict[str, Any]
) -> tuple[str | None, str | None, str | None]:
    """url / api / api_key_env of a method: required (url) and allowed only for http."""
    if backend not in ENDPOINT_BACKENDS:
        for k in ("url", "api", "api_key_env"):
            if k in d:
                raise cx.err(
                    f"{key}.{k}",
                    f"only for backend {' or '.join(ENDPOINT_BACKENDS)} (an endpoint the plugin does not "
                    f"start); backend {backend!r} starts its own engine",
                )
        return None, None, None
    if "url" not in d:
        raise cx.err(f"{key}.url", f"backend {backend!r} needs url: (e.g. http://127.0.0.1:30000)")
    url = cx.string(d["url"], f"{key}.url").rstrip("/")
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise cx.err(
            f"{key}.url",
            f"{url!r} is not an http(s) URL of a server; give scheme, host and port, e.g. "
            "http://10.0.0.5:30000 (the API's paths are added by the plugin)",
        )
    if parts.username or parts.password:
        raise cx.err(
            f"{key}.url",
            "has credentials in it; URLs are written to the results JSON: put the key in an "
            "environment variable and name it in api_key_env",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise cx.err(
            f"{key}.url",
            f"{url!r} has a path, query or fragment; give the server's root "
            f"({parts.scheme}://{parts.netloc}): the plugin adds /generate, /v1/completions, /metrics",
        )
    api = cx.choice(d.get("api", "sglang"), f"{key}.api", APIS)
    key_env = cx.string(d["api_key_env"], f"{key}.api_key_env") if d.get("api_key_env") is not None else None
    return url, api, key_env


def _starts(cx: Ctx, raw: dict[str, Any], d: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A method's ``starts: N``: N engine starts of it, the 2nd.. as methods ``NAME-startK`` (twins:
    the same engine under another name, stats/instances.py reads the start-to-start variance from
    them; the baseline's are its A/A controls). A workload, exclude or include entry that names the
    method names its starts."""
    out: dict[str, Any] = {}
    extra: dict[str, list[str]] = {}
    for n, r in raw.items():
        if not isinstance(r, dict) or "starts" not in r:
            out[n] = r
            continue
        key = f"methods.{n}.starts"
        k = r["starts"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_STARTS:
            raise cx.err(key, f"expected a number of engine starts, 1 to {MAX_STARTS}; got {k!r}")
        if "tune" in r:
            raise cx.err(key, "a tuned sweep has one start per setting; give starts to a method without tune")
        one = {kk: v for kk, v in r.items() if kk != "starts"}
        out[n] = one
        for i in range(2, k + 1):
            name = f"{n}-start{i}"
            if name in raw:
                raise cx.err(
                    key, f"{name!r} is the name of its start {i}, and a method of that name is defined"
                )
            out[name] = dict(one)
            extra.setdefault(n, []).append(name)
    if not extra:
        return out, d
    for key in ("exclude", "include"):  # an entry naming the method names its starts too
        entries = d.get(key)
        if isinstance(entries, list):
            more = [
                {**e, "method": name}
                for e in entries
                if isinstance(e, dict) and isinstance(e.get("method"), str)
                for name in extra.get(e["method"], [])
            ]
            d = {**d, key: entries + more}
    ws = d.get("workloads")
    if isinstance(ws, dict):
        new_ws = {}
        for wn, w in ws.items():
            ms = w.get("methods") if isinstance(w, dict) else None
            if ms is not None:
                ms = ms if isinstance(ms, list) else [ms]
                w = {**w, "methods": [x for m in ms for x in [m, *extra.get(m, [])]]}
            new_ws[wn] = w
        d = {**d, "workloads": new_ws}
    return out, d


def parse(
    data: Any, path: str = "<matrix>", backends: Backends | None = None, base_dir: Path | None = None
) -> Matrix:
    """Validate a loaded YAML document and build the frozen :class:`Matrix`. ``backends``: the
    registered backends' names, or a mapping of each to the most TP it runs (None: any), with
    which an include entry that adds a method at a TP size its backend cannot run is refused."""
    cx = Ctx(path)
    data = without_x_keys(data)  # x-... keys are the file's own (a home for YAML anchors): ignored
    d = cx.mapping(data, "(top level)", TOP_KEYS, required=("models", "methods", "workloads"))
    base = base_dir or Path(path).parent
    raw_models = cx.mapping(d["models"], "models", tuple(d["models"] or ())) if d["models"] else {}
    if not raw_models:
        raise cx.err("models", "at least one model is required")
    models = {cx.name(n, f"models.{n}"): _model(cx, n, r, base) for n, r in raw_models.items()}
    raw_methods = d["methods"]
    if not isinstance(raw_methods, dict) or not raw_methods:
        raise cx.err("methods", "expected a non-empty mapping of method name -> settings")
    raw_methods, d = _starts(cx, raw_methods, d)
    methods: dict[str, Method] = {}  # YAML name -> its first setting (workloads and baseline name these)
    expanded: list[Method] = []
    for n, r in raw_methods.items():
        ms = _method(cx, cx.name(n, f"methods.{n}"), r, models, backends)
        methods[n] = ms[0]
        expanded += ms
    raw_w = d["workloads"]
    if not isinstance(raw_w, dict) or not raw_w:
        raise cx.err(
            "workloads",
            f"expected a non-empty mapping of workload name -> settings (kinds: {', '.join(WORKLOAD_KINDS)})",
        )
    # a workload's methods: may name a YAML method (every setting of a sweep) or one setting
    named = {**methods, **{m.name: m for m in expanded}}
    workloads = tuple(workload(cx, cx.name(n, f"workloads.{n}"), r, named, base) for n, r in raw_w.items())
    baseline = d.get("baseline", DEFAULT_BASELINE)
    if "baseline" in d and baseline not in methods:
        hint = did_you_mean(baseline, methods)
        raise cx.err(
            "baseline", f"{baseline!r} is not defined under methods:{hint}; defined: {', '.join(methods)}"
        )
    if baseline in methods and methods[baseline].sweep:
        raise cx.err("baseline", f"{baseline!r} is a sweep (several settings); the baseline is one method")
    m = Matrix(
        path=path,
        models=tuple(models.values()),
        methods=tuple(expanded),
        tp=cx.int_list(d.get("tp", [1]), "tp"),
        workloads=workloads,
        baseline=str(baseline),
        compare=parse_compare(cx, d.get("compare"), [*methods, *(x.name for x in expanded)]),
        race_delta=_race_delta(cx, d.get("race")),
    )
    everything = m.cells()
    ex = excludes(cx, d.get("exclude"), everything)
    max_tp = dict(backends) if isinstance(backends, Mapping) else None
    inc, added = includes(cx, d.get("include"), everything, ex, max_tp)
    m = dataclasses.replace(
        m,
        methods=add_groups(m.methods, added, m.tp),  # include entries that add a method at a TP
        exclude=ex,
        include=inc,
        hooks=run_hooks(cx, d.get("hooks")),
    )
    seen: dict[str, Cell] = {}
    for c in m.cells():
        if c.id in seen:
            o = seen[c.id]
            raise cx.err(
                f"workloads.{c.workload.name}",
                f"cell id {c.id!r} is produced twice (workload {o.workload.name!r} method {o.method.name!r} "
                f"and workload {c.workload.name!r} method {c.method.name!r}): every cell needs its own id; "
                "remove the repeated value, or rename the method or workload",
            )
        seen[c.id] = c
    check_matches(cx, list(seen.values()))
    check_matrix(cx, methods, m, unchecked_names(cx, d.get("engine_args_unchecked")))
    return m


def load(path: str | Path, backends: Backends | None = None) -> Matrix:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise MatrixError(f"{p}: cannot read the matrix file: {e.strerror}") from None
    try:
        data = load_matrix_yaml(text)  # keys unique, merge keys by the YAML spec
    except DuplicateKeyError as e:
        raise MatrixError(f"{p}: {e}") from None
    except yaml.YAMLError as e:
        raise MatrixError(f"{p}: not valid YAML: {e}") from None
    return parse(data, str(p), backends, p.parent)
