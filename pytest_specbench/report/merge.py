"""``python -m pytest_specbench.report merge A.json B.json ... -o RUN.json``: the shards of one
sharded run (``--specbench-shard I/N``) as one pytest-benchmark JSON.

Every cell once, with its host and shard in its provenance; each cell's speedup is the one its
shard computed, so both sides of a comparison were measured on one host (the split keeps a
baseline and the methods compared with it together); nothing is recomputed across hosts. Refused,
with the reason: files that are not results JSONs, runs of different matrices (cell ids and
definitions, by the matrix digest each JSON records, sharded or not), splits or shard counts, a
shard given twice, a cell in two files, and different versions of pytest-specbench, SGLang, torch
or transformers. Every shard that holds a drift family's baseline and members ran its own
sentinel (plugin/sentinel.py): the merge keeps each shard's sentinels and drift records (each
with its shard), and each member's drift stays the one its own shard's sentinel read
(``speedup_drift.shard``); a sentinel the split planned that a shard's JSON lacks is noted.
Every shard's JSON lists the whole split (each shard's cell ids), so the cells of a shard not
given, or of an interrupted shard, are named one by one (``specbench.missing_cells``); while any
is missing the merge writes nothing and exits 1, unless ``--allow-missing`` asks for the partial
run. Pure: no pytest.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .screen_text import counted

VERSIONED = ("pytest-specbench", "sglang", "torch", "transformers")
LISTS = (
    "engine_groups",
    "engine_stops",
    "reference_engines",
    "failed_cells",
    "crashed_workers",
    "sentinels",  # each shard's drift sentinels and the drift they read: every family's, not the first's
    "drift",
    "control",  # each shard's A/A control records and the verdicts they withheld
    "hook_failures",
)
RACE_LISTS = ("dropped_cells", "tuned_out")  # a raced shard's decisions: every shard's


class MergeError(ValueError):
    pass


def _versions(doc: dict[str, Any]) -> dict[str, Any]:
    v = ((doc.get("machine_info") or {}).get("specbench") or {}).get("versions") or {}
    return {k: v.get(k) for k in VERSIONED}


def _host(doc: dict[str, Any]) -> str | None:
    for b in doc.get("benchmarks") or []:
        host = ((b.get("extra_info") or {}).get("provenance") or {}).get("host")
        if host:
            return str(host)
    return (doc.get("machine_info") or {}).get("node")


def check(docs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Raise MergeError where the files cannot be one run; else notes."""
    sharded = any((d.get("specbench") or {}).get("shard") for _, d in docs if isinstance(d, dict))
    if not docs or (len(docs) < 2 and not sharded):
        raise MergeError(
            f"give the shard JSONs of one sharded run, or two or more runs to merge; got {len(docs)}"
        )
    for name, d in docs:
        if not isinstance(d.get("benchmarks"), list) or not isinstance(d.get("specbench"), dict):
            raise MergeError(f"{name}: not a results JSON of pytest-specbench (no benchmarks / specbench)")
    first, v0 = docs[0][0], _versions(docs[0][1])
    for name, d in docs[1:]:
        v = _versions(d)
        diff = [f"{k} {v0[k]} ({first}) vs {v[k]} ({name})" for k in VERSIONED if v[k] != v0[k]]
        if diff:
            raise MergeError("measured with different versions: " + "; ".join(diff))
    shards = [(name, d["specbench"].get("shard")) for name, d in docs]
    notes: list[str] = []
    digests = [(name, d["specbench"].get("matrix_digest")) for name, d in docs]
    known = [(name, m) for name, m in digests if m]
    for name, m in known[1:]:
        if m != known[0][1]:
            raise MergeError(
                f"{name} and {known[0][0]} are runs of different matrices (matrix_digest {m} against "
                f"{known[0][1]}: cell ids or definitions differ); merge runs of one matrix"
            )
    if known and len(known) < len(digests):
        unknown = ", ".join(name for name, m in digests if not m)
        notes.append(f"{unknown}: no matrix digest (an earlier version): the matrices were not compared")
    if any(s for _, s in shards):
        unsharded = [name for name, s in shards if not s]
        if unsharded:
            raise MergeError(
                f"{', '.join(unsharded)}: not a shard (no specbench.shard); merge the shards of one run "
                "(--specbench-shard I/N)"
            )
        s0 = shards[0][1]
        for key, what in (
            ("matrix_digest", "a different matrix (cell ids or definitions differ)"),
            ("count", "a different number of shards"),
            (
                "split_digest",
                "a different split (other cells selected, or the same cells planned differently: give "
                "every shard the same -k and plan inputs, e.g. --specbench-gpu NAME)",
            ),
        ):
            for name, s in shards[1:]:
                if s.get(key) != s0.get(key):
                    raise MergeError(
                        f"{name} is a shard of {what}: {key} {s.get(key)} against {s0.get(key)} in {first}"
                    )
        seen: dict[int, str] = {}
        for name, s in shards:
            if s["index"] in seen:
                raise MergeError(
                    f"shard {s['index']}/{s['count']} is given twice: {seen[s['index']]} and {name}"
                )
            seen[s["index"]] = name
        missing = sorted(set(range(int(s0["count"]))) - set(seen))
        if missing:
            n = s0["count"]
            gone = ", ".join(f"{i}/{n}" for i in missing)
            notes.append(f"shards missing: {gone}: their cells are not in the merge")
    cells: dict[str, str] = {}
    for name, d in docs:
        for b in d["benchmarks"]:
            cid = b.get("param")
            if cid in cells:
                raise MergeError(f"cell {cid} is in {cells[cid]} and in {name}: every cell once")
            cells[cid] = name
    return notes


def missing_cells(docs: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The cells of the split that the files do not hold, each with its shard and why: every cell
    of a shard whose JSON is not given (each shard's JSON lists the whole split), and the cells of
    an interrupted shard that neither measured nor failed. [] for unsharded runs."""
    shards = [(d["specbench"].get("shard") or {}, d) for _, d in docs]
    if not shards or not shards[0][0]:
        return []
    s0 = shards[0][0]
    count = int(s0["count"])
    split = next((s["split_cells"] for s, _ in shards if s.get("split_cells")), None)
    here = {int(s["index"]): d for s, d in shards}
    out: list[dict[str, Any]] = []
    for i in range(count):
        label = f"{i}/{count}"
        if i not in here:
            if split is None:  # a JSON of an earlier version: the shard's cells are not known
                out.append(
                    {"cell": None, "shard": label, "why": f"shard {label} not given (its cells unknown)"}
                )
            else:
                out += [{"cell": c, "shard": label, "why": f"shard {label} not given"} for c in split[i]]
            continue
        d = here[i]
        if not d["specbench"].get("interrupted") or split is None:
            continue
        done = {b.get("param") for b in d["benchmarks"]}
        done |= {f.get("cell") for f in d["specbench"].get("failed_cells") or [] if isinstance(f, dict)}
        out += [
            {"cell": c, "shard": label, "why": f"shard {label} was interrupted before it"}
            for c in split[i]
            if c not in done
        ]
    return out


def merge(docs: Sequence[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[str]]:
    """(the merged document, notes); raises MergeError."""
    notes = check(docs)
    out = copy.deepcopy(docs[0][1])
    out["benchmarks"] = []
    spec = out["specbench"]
    for k in LISTS:
        spec[k] = []
    spec["engine_starts"] = 0
    spec["resumed_cells"] = []
    spec["gpus_used"] = None
    spec["interrupted"] = None
    spec["shard"] = None
    spec["shards"] = []
    raced = [d["specbench"].get("race") for _, d in docs if isinstance(d["specbench"].get("race"), dict)]
    if raced:
        spec["race"] = {k: [x for r in raced for x in r.get(k) or []] for k in RACE_LISTS}
        spec["race"]["tuning"] = {}
        for r in raced:
            for sweep, dec in (r.get("tuning") or {}).items():
                kept = spec["race"]["tuning"].setdefault(sweep, dec)
                if kept.get("kept") != dec.get("kept"):
                    notes.append(
                        f"tune {sweep}: the shards decided differently "
                        f"({kept.get('kept')} and {dec.get('kept')})"
                    )
    commits = set()
    for name, d in docs:
        s = d["specbench"]
        host, shard = _host(d), s.get("shard") or {}
        label = f"{shard['index']}/{shard['count']}" if shard else None
        for b in d["benchmarks"]:
            b = copy.deepcopy(b)
            prov = b.setdefault("extra_info", {}).setdefault("provenance", {})
            prov.setdefault("host", host)
            if label:
                prov.setdefault("shard", label)
                drift = b["extra_info"].get("speedup_drift")
                if isinstance(drift, dict):  # read from its own shard's sentinel, as the shard did
                    drift["shard"] = label
            prov["merged_from"] = name
            commits.add(prov.get("commit"))
            out["benchmarks"].append(b)
        for k in LISTS:
            spec[k] += [{**e, "shard": label, "host": host} for e in s.get(k) or [] if isinstance(e, dict)]
        notes += _sentinels_missing(name, label, shard, s)
        spec["engine_starts"] += int(s.get("engine_starts") or 0)
        spec["resumed_cells"] += list(s.get("resumed_cells") or [])
        if s.get("interrupted"):
            spec["interrupted"] = {**s["interrupted"], "file": name}
            notes.append(f"{name}: that shard was interrupted ({s['interrupted'].get('why')})")
        spec["shards"].append(
            {
                "file": name,
                "shard": label,
                "host": host,
                "cells": len(d["benchmarks"]),
                "engine_starts": s.get("engine_starts"),
                "planned_s": shard.get("planned_s"),
                "split_digest": shard.get("split_digest"),
                "matrix_digest": shard.get("matrix_digest"),
                "machine": ((d.get("machine_info") or {}).get("specbench") or {}).get("gpus"),
            }
        )
    spec["resumed_cells"] = sorted(spec["resumed_cells"])
    spec["missing_cells"] = missing_cells(docs)
    if spec["missing_cells"]:
        notes.append(missing_line(spec["missing_cells"]))
    if len(commits - {None}) > 1:
        notes.append(f"the shards ran different commits: {', '.join(sorted(c for c in commits if c))}")
    out["datetime"] = max(str(d.get("datetime") or "") for _, d in docs) or out.get("datetime")
    if "compare_pooled" in spec:  # pooled over every shard's shapes, not the first shard's
        from .pooled import figures

        spec["compare_pooled"] = figures(out)
    return out, notes


def _sentinels_missing(
    name: str, label: str | None, shard: dict[str, Any], spec: dict[str, Any]
) -> list[str]:
    """A note for each drift sentinel the split gave this shard (``shard.sentinels``) that its
    JSON does not hold: the members of that family on this shard carry no drift."""
    ran = {x.get("cell_id") for x in spec.get("sentinels") or [] if isinstance(x, dict)}
    gone = [x for x in shard.get("sentinels") or [] if x not in ran]
    if not gone:
        return []
    which = "sentinels" if len(gone) > 1 else "sentinel"
    return [
        f"{name}: shard {label}'s drift {which} {', '.join(gone)} did not run: its members of "
        f"{'those families' if len(gone) > 1 else 'that family'} carry no drift"
    ]


def missing_line(missing: Sequence[dict[str, Any]]) -> str:
    """One line naming every missing cell."""
    known = [m["cell"] for m in missing if m.get("cell")]
    unknown = [m["shard"] for m in missing if not m.get("cell")]
    parts = [f"{counted(len(known), 'cell')} missing: {', '.join(known)}"] if known else []
    if unknown:
        parts.append(
            f"the cells of {'shards' if len(unknown) > 1 else 'shard'} {', '.join(unknown)} (JSONs of an "
            "earlier version do not list them)"
        )
    return "; ".join(parts)


def main(argv: Sequence[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m pytest_specbench.report merge",
        description="Merge the shard JSONs of one sharded run (--specbench-shard I/N) into one.",
    )
    ap.add_argument("json", nargs="+", help="the shards' results JSONs")
    ap.add_argument("-o", "--output", required=True, help="the merged JSON to write")
    ap.add_argument(
        "--allow-missing",
        action="store_true",
        help="write the merge although cells of the split are missing (a shard not given, or "
        "interrupted); it lists them under specbench.missing_cells. Without it the merge writes "
        "nothing and exits 1 while cells are missing",
    )
    args = ap.parse_args(list(argv))
    docs = []
    for p in args.json:
        try:
            docs.append((p, json.loads(Path(p).read_text())))
        except (OSError, ValueError) as e:
            print(f"merge: {p}: cannot read a results JSON: {e}")
            return 2
    try:
        doc, notes = merge(docs)
    except MergeError as e:
        print(f"merge refused: {e}")
        return 2
    missing = doc["specbench"]["missing_cells"]
    if missing and not args.allow_missing:
        print(f"merge incomplete, nothing written: {missing_line(missing)}")
        for m in missing:
            print(f"missing: {m['cell'] or '(cells unknown)'}: {m['why']}")
        print("give the missing shards' JSONs, or --allow-missing to write a partial run that lists them")
        return 1
    from .summary import dumps

    Path(args.output).write_text(dumps(doc))
    hosts = sorted({s["host"] or "?" for s in doc["specbench"]["shards"]})
    print(
        f"merged {len(docs)} files, {len(doc['benchmarks'])} cells, "
        f"{doc['specbench']['engine_starts']} engine starts, hosts {', '.join(hosts)} -> {args.output}"
    )
    for n in notes:
        print(f"note: {n}")
    return 0
