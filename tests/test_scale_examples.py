"""The launch examples of benches/examples/scale/, checked offline: shard wiring, GPU requests,
volumes (Kubernetes), the array and its merge (SLURM), the matrix and the merge job (GitHub)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from pytest_specbench.matrix import schema, shards

SCALE = Path(__file__).parent.parent / "benches" / "examples" / "scale"
ROOT = SCALE.parent.parent.parent


def _script(container: dict) -> str:
    return " ".join(container["args"]) if container.get("command") == ["bash", "-c"] else ""


def test_the_kubernetes_indexed_job_runs_every_shard_on_enough_gpus_and_keeps_the_results() -> None:
    docs = list(yaml.safe_load_all((SCALE / "k8s-indexed-job.yaml").read_text()))
    pvc = next(d for d in docs if d["kind"] == "PersistentVolumeClaim")
    job = next(d for d in docs if d["kind"] == "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    (c,) = spec["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    # one pod per shard, all at once, and the count the plugin reads is the Job's
    assert spec["completions"] == spec["parallelism"] == int(env["SPECBENCH_SHARDS"])
    n = spec["completions"]
    for i in range(n):
        s = shards.from_env({"JOB_COMPLETION_INDEX": str(i), "SPECBENCH_SHARDS": env["SPECBENCH_SHARDS"]})
        assert s is not None and (s.index, s.count) == (i, n)
    # the GPUs a pod asks for: the widest TP of the matrix it runs
    script = _script(c)
    argv = shlex.split(script.replace("&&", " "))
    matrix = schema.load(ROOT / argv[argv.index("--specbench-matrix") + 1])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == max(c.tp for c in matrix.cells()) == 8
    # every shard has cells (no pod idles) and each writes its own JSON to the shared volume
    sp = shards.split(matrix.cells(), matrix.baselines(), n, lambda _: None, lambda _: 60.0)
    assert all(sp.groups), sp.groups
    out = argv[argv.index("--benchmark-json") + 1]
    assert out == "/results/$RUN/shard-$JOB_COMPLETION_INDEX.json"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert (
        mounts["results"] == "/results"
        and vols["results"]["persistentVolumeClaim"]["claimName"] == (pvc["metadata"]["name"])
    )
    assert mounts["shm"] == "/dev/shm" and vols["shm"]["emptyDir"]["medium"] == "Memory"
    # the merge job reads the same directory of the same volume
    (merge,) = yaml.safe_load_all((SCALE / "k8s-merge-job.yaml").read_text())
    (mc,) = merge["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e["value"] for e in mc["env"]}["RUN"] == env["RUN"]
    assert "pytest_specbench.report merge /results/$RUN/shard-*.json -o /results/$RUN/run.json" in _script(mc)
    assert (
        merge["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
        == (pvc["metadata"]["name"])
    )


def test_the_slurm_scripts_shard_by_the_array_and_merge_after_it() -> None:
    array = (SCALE / "slurm-array.sbatch").read_text()
    assert '--benchmark-json "$OUT/shard-${SLURM_ARRAY_TASK_ID}.json"' in array
    assert "--specbench-shard " not in array  # the array's own variables set the shard
    merge = (SCALE / "slurm-merge.sbatch").read_text()
    assert 'pytest_specbench.report merge "$OUT"/shard-*.json -o "$OUT/run.json"' in merge
    submit = (SCALE / "slurm-submit.sh").read_text()
    assert re.search(r"--array=0-\$\(\(N - 1\)\)", submit)
    assert '--dependency=afterany:"$ARRAY"' in submit and "--export=ALL" in submit
    s = shards.from_env(
        {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0"}
    )
    assert s is not None and (s.index, s.count) == (2, 3)


def test_the_github_workflow_runs_one_job_per_shard_and_merges_them_all() -> None:
    wf = yaml.safe_load((SCALE / "github-actions-shards.yml").read_text())
    shard, merge = wf["jobs"]["shard"], wf["jobs"]["merge"]
    values = shard["strategy"]["matrix"]["shard"]
    run = " ".join(s.get("run", "") for s in shard["steps"])
    (count,) = set(re.findall(r'--specbench-shard "\$\{\{ matrix.shard \}\}/(\d+)"', run))
    assert values == list(range(int(count)))
    assert shard["strategy"]["fail-fast"] is False and merge["needs"] == "shard" and merge["if"] == "always()"
    steps = " ".join(s.get("run", "") for s in merge["steps"])
    assert "pytest_specbench.report merge shard-*.json -o run.json" in steps
