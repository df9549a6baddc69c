"""Single-line mutation check of the deciding and statistics code: each mutant changes one line of
a scratch copy of the repository (never the working tree), runs the tests that cover that line
(``-x``: the first failure kills the mutant) and says which mutants survive. A survivor is a line
whose change no test notices.

    python scripts/mutants.py                 # every mutant, on a copy of the working tree
    python scripts/mutants.py --rev HEAD      # on a commit (git archive) instead
    python scripts/mutants.py --only drift-tie race-pool-forced
    python scripts/mutants.py --only drift-tie --tests tests/test_mutants_drift.py   # other tests
    python scripts/mutants.py --list

The scratch copy is put first on PYTHONPATH, so the inner pytest runs (pytester, subprocesses)
import the mutated package, not the installed one. The unmutated copy runs each test set once
first: a set that fails there says nothing about its mutants (they are reported as "baseline
fails"). Exit status: 0 when no mutant survives, 1 otherwise, 2 on a mutant whose line is not
found exactly once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RACE = (
    "tests/test_mutants_race_pools.py",
    "tests/test_mutants_looks.py",
    "tests/test_deciding.py",
    "tests/test_race.py",
)
DRIFT = ("tests/test_mutants_rules.py", "tests/test_drift.py", "tests/test_drift_views.py")
SELECT = (
    "tests/test_mutants_rules.py",
    "tests/test_matrix_select.py",
    "tests/test_matrix_xkeys.py",
    "tests/test_group_hooks.py",
)
VERSUS = ("tests/test_mutants_rules.py", "tests/test_versus.py", "tests/test_drift_views.py")
LOAD = (
    "tests/test_mutants_looks.py",
    "tests/test_load_verdicts.py",
    "tests/test_verdicts.py",
    "tests/test_paired.py",
)
VERDICT = ("tests/test_paired.py", "tests/test_verdicts.py")
SEQ = ("tests/test_mutants_looks.py", "tests/test_sequential.py", "tests/test_deciding.py")
POOLED = ("tests/test_mutants_looks.py", "tests/test_pooled.py", "tests/test_views.py")
SCHED = (
    "tests/test_mutants_looks.py",
    "tests/test_schedule.py",
    "tests/test_plan.py",
    "tests/test_gpu_slices.py",
)
TUNE = ("tests/test_mutants_tune.py", "tests/test_deciding.py", "tests/test_sweep.py", "tests/test_race.py")


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str  # a substring of exactly one line of ``file``
    new: str  # what replaces it on that line
    tests: tuple[str, ...]  # pytest arguments: the files (or node ids) that cover the line


RE = "pytest_specbench/deciding/entries.py"
CTL, LEGS = "pytest_specbench/report/control.py", "pytest_specbench/stats/ttft_legs.py"
CONTROL = ("tests/test_instance_control.py",)
R, D, S, V = (
    "pytest_specbench/deciding/race.py",
    "pytest_specbench/report/drift.py",
    "pytest_specbench/matrix/selectors.py",
    "pytest_specbench/report/versus.py",
)
P, Q, PO = (
    "pytest_specbench/stats/paired.py",
    "pytest_specbench/stats/sequential.py",
    "pytest_specbench/report/pooled.py",
)
SEL, STOP = "pytest_specbench/deciding/selection.py", "pytest_specbench/deciding/stopping.py"
POWER = ("tests/test_race_power.py",)
SC, T, CW = (
    "pytest_specbench/planning/schedule.py",
    "pytest_specbench/deciding/tune.py",
    "pytest_specbench/report/cell_warnings.py",
)
ST, GS, G = (
    "pytest_specbench/deciding/store.py",
    "pytest_specbench/stats/gate_stats.py",
    "pytest_specbench/report/gate.py",
)
MORE = "tests/test_mutants_more.py"
STORE = (MORE, "tests/test_store_faults.py", "tests/test_deciding.py")
GATE = (MORE, "tests/test_gate.py", "tests/test_gate_checks.py", "tests/test_gate_raced.py")
TUNE_MORE = (MORE, *TUNE, "tests/test_tune_apart.py", "tests/test_paired.py")

INS, RINS = "pytest_specbench/stats/instances.py", "pytest_specbench/report/instances.py"
INSTANCES = ("tests/test_instances.py",)
SCREEN_TRUTHS = ("tests/test_screen_truths.py",)
MUTANTS: tuple[Mutant, ...] = (
    # the screen says the reason that held; a verdict under load from the fewest pairs keeps its error
    Mutant(
        "screen-too-few-margin",
        "pytest_specbench/report/pairwise.py",
        "return ci[0] <= 1 + EQUIVALENCE and ci[1] >= 1 - EQUIVALENCE",
        "return True",
        SCREEN_TRUTHS,
    ),
    Mutant(
        "screen-bar-point",
        "pytest_specbench/report/decide.py",
        'return "bar" if LOAD_BIAS <= point <= 1 / LOAD_BIAS else "bar, point beyond"',
        'return "bar"',
        SCREEN_TRUTHS,
    ),
    Mutant(
        "load-pairs-t-df",
        P,
        "return t975(n - 1) if looks is None or looks.one else looks.critical(n)",
        "return t975(n) if looks is None or looks.one else looks.critical(n)",
        ("tests/test_load_pairs_sim.py",),
    ),
    # two levels of variance: the start level widens verdicts, a twin off the others is withheld
    Mutant(
        "instances-no-widen",
        RINS,
        "if starts is None or starts.tau2 <= 0 or not f.get",
        "if True or not f.get",
        INSTANCES,
    ),
    Mutant(
        "instances-no-disagree",
        RINS,
        "if lvl.disagree(p, lvl.estimate(got, leave_out=p.a)):",
        "if False:",
        INSTANCES,
    ),
    Mutant(
        "instances-subtract",
        INS,
        "tau2 = math.fsum(p.d**2 for p in use)",
        "tau2 = math.fsum(p.d**2 - p.v for p in use)",
        INSTANCES,
    ),
    Mutant(
        "race-unmeasured-starts",
        R,
        "return None  # engines started apart and no pair",
        "pass  # engines started apart and no pair",
        INSTANCES,
    ),
    Mutant(
        "race-twin-skip",
        R,
        "if paired.axes(lost_at.params()) == paired.axes(cell.params()):",
        "if False:",
        INSTANCES,
    ),
    Mutant("race-starts-var", R, "extra_var=starts.var() if starts else 0.0,", "extra_var=0.0,", INSTANCES),
    Mutant(
        "instances-no-combine",
        RINS,
        'record["combined"] = _combine(',
        'record["combined"] = [] or (',
        INSTANCES,
    ),
    Mutant("instances-per-shape", RINS, "return lvl.per_start(out)", "return [p for _, p in out]", INSTANCES),
    Mutant(
        "stop-futile-leader",
        STOP,
        "return gap is not None and gap.point >= 1 and _rivals_to_come(lead)",
        "return False",
        POWER,
    ),
    Mutant("race-baseline-beside", R, "if precision is None and self.read_beside(cell):", "if False:", POWER),
    Mutant(
        "stop-rivals-to-come",
        STOP,
        'return lead is None or lead[1].get("rivals_to_come", 1) > 0',
        "return True",
        POWER,
    ),
    Mutant("stop-futile-optimism", STOP, "OPTIMISM = 0.5", "OPTIMISM = 1.0", POWER),
    Mutant(
        "pooled-load-unalike",
        "pytest_specbench/report/pooled.py",
        'if not c.get("speedup_under_load"):  # the load unalike',
        "if False:  # the load unalike",
        ("tests/test_pooled.py",),
    ),
    Mutant(
        "pooled-starts-once",
        "pytest_specbench/report/pooled.py",
        "if starts > 0:  # the two sides' engine starts",
        "if False:  # the two sides' engine starts",
        ("tests/test_pooled.py",),
    ),
    # drift between groups measured apart: the brackets', never a constant
    Mutant(
        "race-apart-constant",
        R,
        "return None  # nothing measured the drift between groups",
        "return 0.13, 'allowed'",
        ("tests/test_race_tp_dominated.py", "tests/test_tune_apart.py"),
    ),
    # racing pools: drafters race drafters, a forced accept length only its own sweep
    Mutant(
        "race-pool-forced", R, "if other is None or forced(other) != forced(cell):", "if other is None:", RACE
    ),
    Mutant(
        "race-pool-sweep",
        R,
        "return not forced(cell) or other.method.sweep == cell.method.sweep",
        "return True",
        RACE,
    ),
    Mutant("race-leader-pool", R, "and self.same_pool(cell, shape, e.method)", "and True", RACE),
    Mutant(
        "race-family-pool",
        R,
        "and (name == cell.method.name or self.same_pool(cell, shape, name))",
        "and True",
        RACE,
    ),
    Mutant(
        "race-apart-far-ends",
        RE,
        "own.lo / lead.hi, own.hi / lead.lo,",
        "own.lo / lead.lo, own.hi / lead.hi,",
        RACE,
    ),
    Mutant(
        "race-costlier-strict",
        RE,
        "return all(d >= 0 for d in bigger) and any(d > 0 for d in bigger)",
        "return all(d >= 0 for d in bigger)",
        RACE,
    ),
    Mutant(
        "race-drift-widen",
        R,
        "lo, hi = lo * (1 - self.drift), hi / (1 - self.drift)",
        "lo, hi = lo, hi",
        RACE,
    ),
    Mutant("race-gain-evidence", R, "if len(gains) < 2:", "if len(gains) < 1:", RACE),
    Mutant(
        "race-never-drop-disturbed",
        R,
        'if info and info.get("status") == "dropped" and why:',
        "if False:",
        RACE,
    ),
    Mutant(
        "race-first-look",
        RE,
        "return max(2, min(MIN_ROUNDS, cap - 2))",
        "return max(2, min(MIN_ROUNDS, cap - 1))",
        RACE,
    ),
    Mutant(
        "race-skip-gain",
        R,
        'if gain is not None and info["hi"] * gain < 1 - info.get("delta", paired.EQUIVALENCE):',
        'if gain is not None and info["hi"] < 1 - info.get("delta", paired.EQUIVALENCE):',
        RACE,
    ),
    # the drift sentinel's rules
    Mutant(
        "drift-tie",
        D,
        "if band > math.log(1 + EQUIVALENCE):",
        "if band > math.log(1 + 2 * EQUIVALENCE):",
        DRIFT,
    ),
    Mutant("drift-point", D, "if abs(math.log(point)) < band:", "if abs(math.log(point)) < band / 2:", DRIFT),
    Mutant(
        "drift-interval",
        D,
        "if not (math.log(lo) > band or math.log(hi) < -band):",
        "if not (math.log(lo) > 0 or math.log(hi) < 0):",
        DRIFT,
    ),
    Mutant(
        "drift-interleaved-exempt",
        D,
        'if rec is None or f is None or f.get("speedup_pairing") == "interleaved":',
        "if rec is None or f is None:",
        DRIFT,
    ),
    Mutant(
        "drift-pooled-interval",
        "pytest_specbench/stats/drift.py",
        "half = t975(df) * math.sqrt(ss / df) * math.sqrt(1 / n + 1 / m)",
        "half = t975(df) * math.sqrt(ss / df) * math.sqrt(1 / n)",
        DRIFT,
    ),
    Mutant(
        "drift-band-far-end",
        "pytest_specbench/stats/drift.py",
        "return True, max(abs(lo), abs(hi))",
        "return True, min(abs(lo), abs(hi))",
        DRIFT,
    ),
    # include / exclude
    Mutant("include-order", S, "for o in hits:", "for o in reversed(hits):", SELECT),
    Mutant(
        "include-after-exclude",
        S,
        "kept = [c for c in cells if not any(s.matches(c) for s in excluded)]",
        "kept = list(cells)",
        SELECT,
    ),
    # the versus view never compares two target models
    Mutant(
        "versus-model-guard",
        V,
        'if ca["extra_info"].get("speedup_baseline") != cb["extra_info"].get("speedup_baseline"):',
        "if False:",
        VERSUS,
    ),
    # a verdict kept under load
    Mutant(
        "load-margin-faster",
        P,
        'if (out["speedup_verdict"] == "faster" and lo <= 1 / LOAD_BIAS) or (',
        'if (out["speedup_verdict"] == "faster" and lo <= 1) or (',
        LOAD,
    ),
    Mutant(
        "load-margin-slower",
        P,
        'out["speedup_verdict"] == "slower" and hi >= LOAD_BIAS',
        'out["speedup_verdict"] == "slower" and hi >= 1',
        LOAD,
    ),
    Mutant("load-gap", P, "if gaps[k] > LOAD_GAP:", "if gaps[k] > 2 * LOAD_GAP:", LOAD),
    Mutant("load-pair-cv", P, "if spread is None or spread > PAIR_CV_MAX:", "if spread is None:", LOAD),
    Mutant(
        "load-cpu-only",
        P,
        'return d.startswith("other processes took") and "GPU" not in d and not m.get("saturated")',
        'return d.startswith("other processes took") and not m.get("saturated")',
        LOAD,
    ),
    Mutant(
        "load-kept-said",
        CW,
        'kept = e.get("speedup_under_load")',
        "kept = None",
        ("tests/test_mutants_looks.py", "tests/test_decide.py", "tests/test_load_verdicts.py"),
    ),
    # the paired verdict's margins
    Mutant("verdict-faster-margin", P, "if self.lo > 1 + EQUIVALENCE:", "if self.lo > 1:", VERDICT),
    Mutant(
        "verdict-within-both-ends",
        P,
        "if 1 - EQUIVALENCE <= self.lo and self.hi <= 1 + EQUIVALENCE:",
        "if 1 - EQUIVALENCE <= self.lo or self.hi <= 1 + EQUIVALENCE:",
        VERDICT,
    ),
    # sequential looks
    Mutant("seq-family-share", Q, "return self.looks_level / self.family", "return self.looks_level", SEQ),
    Mutant(
        "seq-bonferroni",
        Q,
        "return ALPHA / self.count  # Bonferroni",
        "return ALPHA  # Bonferroni",
        SEQ,
    ),
    Mutant("seq-no-stop-before-first", Q, "if n < looks.first:", "if n < 2:", SEQ),
    Mutant(
        "seq-settled-needs-looks-left",
        Q,
        "if settled_as is not None and looks.last > looks.first:",
        "if settled_as is not None:",
        SEQ,
    ),
    Mutant("seq-union-family", Q, "max(x.family for x in given))", "min(x.family for x in given))", SEQ),
    # pooling shapes
    Mutant(
        "pooled-share",
        PO,
        'level = min(e["level"] for e in est) / k',
        'level = min(e["level"] for e in est)',
        POOLED,
    ),
    Mutant(
        "pooled-strictest-level",
        PO,
        'level = min(e["level"] for e in est) / k',
        'level = max(e["level"] for e in est) / k',
        POOLED,
    ),
    Mutant(
        "pooled-choice-corrected",
        PO,
        'k = len(candidates) if tuning and tuning.get("kept") else _sweep_size(doc, a, settings)',
        "k = 1",
        POOLED,
    ),
    # packing groups onto GPUs
    Mutant(
        "sched-longest-first",
        SC,
        "return sorted(jobs, key=lambda j: (-j.duration_s, -j.size, j.group))",
        "return sorted(jobs, key=lambda j: (j.duration_s, -j.size, j.group))",
        SCHED,
    ),
    Mutant(
        "sched-lowest-gpus",
        SC,
        "left = sorted(free)",
        "left = sorted(free, reverse=True)",
        SCHED,
    ),
    Mutant(
        "sched-first-start-extra",
        SC,
        "extra = 0.0 if (worker, job.backend) in started else job.first_extra_s",
        "extra = job.first_extra_s",
        SCHED,
    ),
    Mutant(
        "sched-fits-whole-pool",
        SC,
        "queue = [j for j in jobs if j.gpus <= len(pool_t)]",
        "queue = [j for j in jobs if j.gpus < len(pool_t)]",
        SCHED,
    ),
    # tuning a sweep
    Mutant("tune-separated-margin", T, "if iv[2] < 1 - delta:", "if iv[2] < 1:", TUNE),
    Mutant(
        "tune-within-keep",
        T,
        "if len(kept) > tune.keep and len(within) == len(kept) - 1:",
        "if False:",
        POWER,
    ),
    Mutant("tune-dropped-out", T, "if name != best:", "if False:", POWER),
    # racing with an indifference zone (deciding/selection.py, deciding/stopping.py)
    Mutant("select-floor", SEL, "floor = 1 - delta", "floor = 1.0", POWER),
    Mutant(
        "select-one-sided",
        SEL,
        "return t_quantile(min(1.0, 2 * level), max(1, df))",
        "return t_quantile(level, max(1, df))",
        POWER,
    ),
    Mutant("select-pooled", SEL, "if shape_var is not None and shape_var[1] > df:", "if False:", POWER),
    Mutant("stop-open-continues", STOP, 'getattr(gap, "status", "") == "open"', "False", POWER),
    Mutant(
        "stop-leader-precision", STOP, "gap.point >= 1 and not _known_to(", "False and not _known_to(", POWER
    ),
    Mutant(
        "apart-all-rounds",
        P,
        'iv = unpaired_ratio_interval(a["rates"], b["rates"], apart_looks(cell, base))',
        "iv = None",
        POWER,
    ),
    Mutant("tune-family", T, "family = max(1, len(measured) - 1)", "family = 1", TUNE),
    # the A/A control: it withholds what its instance effect could explain, only when established,
    # and a race's drop at its shape must clear it
    Mutant("control-withhold", CTL, "        if why:", "        if False:", CONTROL),
    Mutant("control-established", CTL, "established=b > 0, band=b", "established=True, band=b", CONTROL),
    Mutant(
        "race-control-band",
        R,
        "band = self.control_band(cell, looks) if relative else 0.0",
        "band = 0.0",
        CONTROL,
    ),
    Mutant("race-control-never-races", R, "and method not in self.controls", "and True", CONTROL),
    # TTFT's legs: the client's own legs (send + delivery), on average and at p99, decide client_bound
    Mutant(
        "legs-delivery-bound",
        LEGS,
        "if c and ((own > bound_ms and own > bound_fraction * c) or own99 > bound_p99_ms):",
        "if c:",
        ("tests/test_ttft_legs.py",),
    ),
    Mutant(
        "legs-own-p99",
        LEGS,
        "if c and ((own > bound_ms and own > bound_fraction * c) or own99 > bound_p99_ms):",
        "if c and own > bound_ms and own > bound_fraction * c:",
        ("tests/test_ttft_legs.py",),
    ),
    Mutant(
        "legs-add-up",
        LEGS,
        "if c is not None and abs(total - c) > CLOCK_SLACK_MS:",
        "if False:",
        ("tests/test_ttft_legs.py",),
    ),
    # the decision store: whole lines only, from where this reader stopped, under the lock
    Mutant("store-partial-line", ST, 'end = data.rfind(b"\\n") + 1', "end = len(data)", STORE),
    Mutant("store-reread-all", ST, "f.seek(self._offset)", "f.seek(0)", STORE),
    Mutant("store-no-lock", ST, "with self._locked(fcntl.LOCK_EX):", "with contextlib.nullcontext():", STORE),
    # the gate: Holm's step-down stops at its first non-rejection; the run-wide check on the interval
    Mutant("holm-step-down-stop", GS, "going = going and t.p <= t.bar", "going = t.p <= t.bar", GATE),
    Mutant("gate-run-wide-interval", G, "if hi < floor:", "if point < floor:", GATE),
    # tuning: the standard error of a mean, the pooled df the fewest, the first decision wins
    Mutant(
        "tune-standard-error",
        T,
        "va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)",
        "va, vb = statistics.variance(la), statistics.variance(lb)",
        TUNE_MORE,
    ),
    Mutant(
        "pooled-df-fewest",
        P,
        "t = t_quantile(level, max(1, min(p[2] for p in parts)))",
        "t = t_quantile(level, max(1, max(p[2] for p in parts)))",
        TUNE_MORE,
    ),
    Mutant(
        "tune-first-decision-wins",
        R,
        'self.tuning.setdefault(ev["sweep"], ev["decision"])',
        'self.tuning[ev["sweep"]] = ev["decision"]',
        TUNE_MORE,
    ),
    # an A/A control's band widens a drop's interval on both sides
    Mutant(
        "race-control-side",
        R,
        "lo, hi = lo * math.exp(-band), hi * math.exp(band)",
        "lo, hi = lo, hi * math.exp(band)",
        ("tests/test_mutants_more.py", *CONTROL),
    ),
)


def scratch_copy(dest: Path, rev: str | None) -> None:
    """The repository's files (tracked and untracked, not ignored; or ``rev``'s tree) under dest."""
    dest.mkdir(parents=True)
    if rev:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in names:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def mutate(text: str, m: Mutant) -> str:
    lines = text.splitlines(keepends=True)
    hits = [i for i, ln in enumerate(lines) if m.old in ln]
    if len(hits) != 1:
        raise LookupError(f"{m.name}: {m.file}: {m.old!r} is on {len(hits)} lines (expected exactly 1)")
    i = hits[0]
    lines[i] = lines[i].replace(m.old, m.new)
    return "".join(lines)


def run_tests(copy: Path, tests: tuple[str, ...], extra: list[str]) -> tuple[bool, str]:
    env = dict(os.environ, PYTHONPATH=str(copy) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *extra]
    res = subprocess.run([*cmd, *tests], cwd=copy, env=env, capture_output=True, text=True)
    tail = (res.stdout.strip().splitlines() or [""])[-1]
    return res.returncode == 0, tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    ap.add_argument("--rev", help="mutate this commit's tree (git archive) instead of the working tree")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
    ap.add_argument(
        "--tests",
        nargs="+",
        metavar="PATH",
        help="run these test files (or node ids) for every mutant chosen",
    )
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the scratch copy is removed, the tests stopped
    chosen = [m for m in MUTANTS if not a.only or m.name in a.only]
    if a.tests:
        chosen = [dataclasses.replace(m, tests=tuple(a.tests)) for m in chosen]
    unknown = set(a.only or ()) - {m.name for m in MUTANTS}
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(sorted(unknown))}; --list shows them")
    if a.list:
        for m in chosen:
            print(f"{m.name}: {m.file}: {m.old!r} -> {m.new!r}  [{' '.join(m.tests)}]")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="specbench-mutants-"))
    copy = tmp / "repo"
    scratch_copy(copy, a.rev)
    probe = subprocess.run(
        [sys.executable, "-c", "import pytest_specbench; print(pytest_specbench.__file__)"],
        cwd=tmp,
        env=dict(os.environ, PYTHONPATH=str(copy)),
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not probe.startswith(str(copy)):
        print(f"the scratch copy's package is not the one imported ({probe}); not run", file=sys.stderr)
        return 2
    print(f"scratch copy: {copy}")
    try:
        return _run(copy, chosen, a.pytest_args)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(copy: Path, chosen: list[Mutant], extra: list[str]) -> int:
    bad = []
    for m in chosen:
        try:
            mutate((copy / m.file).read_text(), m)
        except LookupError as e:
            bad.append(str(e))
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 2
    baseline: dict[tuple[str, ...], tuple[bool, str]] = {}
    for tests in dict.fromkeys(m.tests for m in chosen):
        baseline[tests] = run_tests(copy, tests, extra)
        ok, tail = baseline[tests]
        print(f"unmutated {' '.join(tests)}: {'passes' if ok else 'FAILS'} ({tail})", flush=True)
    survivors, killed, unknown = [], [], []
    for m in chosen:
        path = copy / m.file
        original = path.read_text()
        if not baseline[m.tests][0]:
            unknown.append(m.name)
            print(f"{m.name}: baseline fails, not judged", flush=True)
            continue
        t0 = time.monotonic()
        path.write_text(mutate(original, m))
        try:
            ok, tail = run_tests(copy, m.tests, extra)
        finally:
            path.write_text(original)
        (survivors if ok else killed).append(m.name)
        print(
            f"{m.name}: {'SURVIVED' if ok else 'killed'} ({tail}; {time.monotonic() - t0:.0f} s)", flush=True
        )
    print(f"\n{len(killed)} killed, {len(survivors)} survived, {len(unknown)} not judged of {len(chosen)}")
    if survivors:
        print("survivors: " + ", ".join(survivors))
    if unknown:
        print("not judged (their tests fail unmutated): " + ", ".join(unknown))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
