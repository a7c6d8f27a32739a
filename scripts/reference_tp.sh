#!/usr/bin/env bash
# Runs the tensor-parallel GPU test and the `gpubench tp` reference runs on a machine with 2 or
# more GPUs and packs them. Usage: scripts/reference_tp.sh OUT_DIR [MACHINE_NAME]
# (GPUBENCH_BUILD_DIR: the build; GPUBENCH_TP_STEPS picks the steps, default
# "tests full copy oneshot sp micro mpi quick"; "mpi" needs mpirun).
set -uo pipefail
out=${1:?usage: scripts/reference_tp.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-machine}
export NCCL_NVLS_ENABLE=0
build=${GPUBENCH_BUILD_DIR:-build}
bin=$PWD/$build/gpubench
export GPUBENCH_BINARY=$bin
steps=${GPUBENCH_TP_STEPS:-tests full copy oneshot sp micro mpi quick}
work=$(mktemp -d)/$machine
mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/reference_lib.sh"
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >"$work/topo.txt" 2>&1
has tests && timed gpu_test_tp_engine 300 "$build/tests/gpu_test_tp_engine"
# The issue's points: llama-2-7b, batch 1, every degree the GPUs allow, prefill to 4096 tokens,
# decode at context 2048.
has full && timed tp_full 500 "$bin" tp --output-dir "$work/tp_full"
# The same over the copy engines with prefill overlapped in 2 chunks (config/default.ini's [tp]).
has copy && timed tp_copy_engine_overlap 500 "$bin" tp --collectives copy-engine --overlap \
  --overlap-chunks 2 --output-dir "$work/tp_copy_engine_overlap"
# Decode's small all-reduces through the one-shot kernel (what tp_full's default, auto, takes
# in one process), beside NCCL's (batch 1 to 16).
has oneshot && timed tp_one_shot 300 "$bin" tp --seq-lens 1024 --contexts 2048,8192 \
  --batch-sizes 1,4,8,16 --small-collectives one-shot --output-dir "$work/tp_one_shot"
has oneshot && timed tp_one_shot_nccl 300 "$bin" tp --seq-lens 1024 --contexts 2048,8192 \
  --batch-sizes 1,4,8,16 --small-collectives nccl --output-dir "$work/tp_one_shot_nccl"
has sp && timed tp_sequence_parallel 300 "$bin" tp --sequence-parallel --seq-lens 1024,4096 \
  --output-dir "$work/tp_sequence_parallel"
has micro && timed tp_micro 300 "$bin" tp --micro column,row --overlap \
  --output-dir "$work/tp_micro"
# A process per GPU under mpirun against the threads of tp_full (8 layers keep it short).
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
has mpi && command -v mpirun >/dev/null && timed tp_mpi 300 mpirun --allow-run-as-root \
  --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE "$bin" tp --layers 8 --seq-lens 1024,4096 \
  --output-dir "$work/tp_mpi"
has quick && timed tp_quick 200 "$bin" tp --quick --output-dir "$work/tp_quick"
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
for f in tp_full tp_copy_engine_overlap tp_one_shot tp_one_shot_nccl tp_sequence_parallel tp_quick; do
  [ -f "$work/$f.log" ] && grep -A12 "^Headline" "$work/$f.log" | head -14
done
grep -h "PASSED\|FAILED\|SKIPPED" "$work"/gpu_test_*.log 2>/dev/null
