#!/usr/bin/env bash
# gpubench under a real single-node Slurm (Debian's slurm-wlm and munge, started here and
# stopped on exit): `srun -n 2` and `sbatch` on a machine without a GPU must end every rank
# with the no-GPU exit code (3) and its message, without hanging; so must a batch script that
# runs gpubench directly with SLURM_NTASKS set (no srun). Exits 77 (skipped) when Slurm cannot
# be installed or started here (not root, no apt), or when this machine has a GPU (the no-GPU
# outcome is what is checked).
# Usage: tests/slurm/test_slurm.sh GPUBENCH_BINARY
set -uo pipefail
bin=$(readlink -f "${1:?usage: test_slurm.sh GPUBENCH_BINARY}")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; [[ -f "$work/slurmctld.log" ]] && tail -n 20 "$work"/slurm*.log; exit 1; }
nvidia-smi -L >/dev/null 2>&1 && skip "this machine has a GPU: the no-GPU outcome cannot be checked"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null ||
    skip "no Slurm, and no root apt to install it"
  install() { apt-get install -y -q slurm-wlm munge >/dev/null 2>&1; }
  install || { apt-get update -q >/dev/null 2>&1 && install; } ||
    skip "apt-get could not install slurm-wlm and munge"
fi
[[ $(id -u) -eq 0 ]] || skip "starting slurmctld and slurmd here needs root"

work=$(mktemp -d /tmp/gpubench_slurm.XXXXXX)
host=$(hostname -s)
cleanup() {
  [[ -n "${ctld:-}" ]] && kill "$ctld" 2>/dev/null
  [[ -n "${slurmd:-}" ]] && kill "$slurmd" 2>/dev/null
  [[ -n "${munge:-}" ]] && kill "$munge" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# munge with its own key, socket and files under $work.
mkdir -p "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$work/munge/munge.key"
munged --force --foreground --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" \
  >"$work/munge/out" 2>&1 &
munge=$!
cat >"$work/slurm.conf" <<CONF
ClusterName=gpubench
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
mkdir -p "$work/state" "$work/spool"
export SLURM_CONF=$work/slurm.conf
for _ in $(seq 50); do [[ -S "$work/munge/socket" ]] && break; sleep 0.1; done
slurmctld -D -i >/dev/null 2>&1 &
ctld=$!
slurmd -D >/dev/null 2>&1 &
slurmd=$!
up=0
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)' && { up=1; break; }
  sleep 0.5
done
((up)) || skip "slurmctld and slurmd did not come up ($(tail -n 1 "$work/slurmctld.log" 2>/dev/null))"

cd "$work" || exit 1
status=0
for script in "$repo"/scripts/slurm/*.sbatch; do
  bash -n "$script" || { echo "$script does not parse"; status=1; }
done
# srun -n 2 (no --mpi: gpubench starts MPI only for a run on GPUs): each rank of allreduce (which
# runs a process per GPU) ends with exit 3 and the no-GPU line.
timeout 120 srun -n 2 -o "$work/srun_%t.out" "$bin" allreduce --no-files
rc=$?
echo "srun -n 2: exit $rc"
((rc == 124)) && fail "srun -n 2 hung"
((rc == 3)) || { echo "srun exit $rc, expected 3"; status=1; }
for t in 0 1; do
  grep -q "no usable GPU" "$work/srun_$t.out" ||
    { echo "rank $t said:"; cat "$work/srun_$t.out"; status=1; }
done
# sbatch: a batch script with srun inside, and one running gpubench directly (SLURM_NTASKS=2
# set, one process: it must not wait for a second rank).
cat >"$work/job.sh" <<JOB
#!/bin/bash
#SBATCH -n 2
#SBATCH -t 2
srun "$bin" allreduce --no-files
echo "srun rc=\$?"
SLURM_NTASKS=2 "$bin" allreduce --no-files
echo "direct rc=\$?"
JOB
job=$(sbatch --parsable -o "$work/job.out" "$work/job.sh") || fail "sbatch refused the job"
for _ in $(seq 240); do
  squeue -h -j "$job" 2>/dev/null | grep -q . || break
  sleep 0.5
done
squeue -h -j "$job" 2>/dev/null | grep -q . && fail "the sbatch job did not finish within 120 s"
cat "$work/job.out"
grep -q "srun rc=3" "$work/job.out" || { echo "sbatch's srun did not exit 3"; status=1; }
grep -q "direct rc=3" "$work/job.out" ||
  { echo "gpubench alone in the batch script did not exit 3"; status=1; }
(($(grep -c "no usable GPU" "$work/job.out") >= 3)) ||
  { echo "expected the no-GPU line from 3 processes"; status=1; }
((status == 0)) && echo "PASS: srun -n 2, sbatch's srun, SLURM_NTASKS without srun: exit 3 each"
exit $status
