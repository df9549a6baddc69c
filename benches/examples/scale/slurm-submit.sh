#!/bin/bash
# Submit a sharded run to SLURM: N array tasks (one shard each) and a merge job that waits for them.
#   bash benches/examples/scale/slurm-submit.sh N [sbatch options for the shard tasks...]
# e.g. bash benches/examples/scale/slurm-submit.sh 3 --gpus-per-task=8 --time=04:00:00
set -euo pipefail
N=${1:?give the number of shards}; shift
HERE=$(cd "$(dirname "$0")" && pwd)
TAG=${SPECBENCH_TAG:-$(date +%Y%m%d-%H%M%S)}
export SPECBENCH_OUT=${SPECBENCH_OUT:-$PWD/results/$TAG}
mkdir -p "$SPECBENCH_OUT"
ARRAY=$(sbatch --parsable --export=ALL --array=0-$((N - 1)) "$@" "$HERE/slurm-array.sbatch")
MERGE=$(sbatch --parsable --export=ALL --dependency=afterany:"$ARRAY" "$HERE/slurm-merge.sbatch")
echo "array job $ARRAY ($N shards), merge job $MERGE; results in $SPECBENCH_OUT"
