#!/bin/bash
# A one-node SLURM cluster on this machine (Debian's slurm-wlm 22.05 and munge, as root), then the
# default job as a 3-task array (one shard each: benches/examples/scale/slurm-submit.sh) and the
# dependent merge job. Everything it made goes to $OUT (default /tmp/slurm-local):
#   bash scripts/slurm_local.sh            # install if needed, start the daemons, submit, wait
#   SHARDS=3 PYTHON=.venv/bin/python OUT=/tmp/slurm-local bash scripts/slurm_local.sh
# The node offers this machine's cores; each shard task asks for all of them (--cpus-per-task), so
# the shards run one after another and each measures an otherwise idle machine. It writes
# /etc/slurm/slurm.conf and /etc/munge/munge.key (a machine with its own SLURM is not the place for it)
# and waits until the whole queue is empty.
set -euo pipefail
SHARDS=${SHARDS:-3}
OUT=${OUT:-/tmp/slurm-local}
PYTHON=${PYTHON:-$(command -v python3)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
command -v slurmctld >/dev/null || apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
NODE=$(hostname -s)
CPUS=$(nproc)
MEM=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=specbench
SlurmctldHost=$NODE
AuthType=auth/munge
SlurmUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$NODE CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=main Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 400 /etc/munge/munge.key
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 30); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo | tee "$OUT/sinfo.txt"
export PYTHON SPECBENCH_OUT="$OUT/results"
cd "$REPO"
bash benches/examples/scale/slurm-submit.sh "$SHARDS" --cpus-per-task="$CPUS" | tee "$OUT/submit.txt"
ARRAY=$(awk '{print $3}' "$OUT/submit.txt"); MERGE=$(awk '{print $8}' "$OUT/submit.txt" | tr -d ';')
: > "$OUT/squeue.txt"
while squeue -h | grep -q .; do
  { date +%T; squeue; } >> "$OUT/squeue.txt"
  sleep 20
done
scontrol show job "$MERGE" > "$OUT/merge-job.txt" 2>&1 || true
cp /var/log/slurm/slurmctld.log "$OUT/slurmctld.log"
mv "$REPO"/slurm-"$ARRAY"_*.out "$REPO"/slurm-"$MERGE"-merge.out "$OUT/" 2>/dev/null || true
echo "done: $OUT (array $ARRAY, merge $MERGE)"
