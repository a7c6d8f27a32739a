#!/usr/bin/env bash
# Runs the collectives' GPU tests and reference sweeps on a multi-GPU machine and packs them.
# Usage: scripts/reference_allreduce.sh OUT_DIR [MACHINE_NAME]   (GPUBENCH_BUILD_DIR: the build)
set -uo pipefail
out=${1:?usage: scripts/reference_allreduce.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-machine}
export NCCL_NVLS_ENABLE=0
build=${GPUBENCH_BUILD_DIR:-build}
bin=$PWD/$build/gpubench
export GPUBENCH_BINARY=$bin
work=$(mktemp -d)/$machine
mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/reference_lib.sh"
ngpu=$(nvidia-smi -L | wc -l)
timed gpu_test_collectives 300 "$build/tests/gpu_test_collectives"
timed allreduce_all 300 "$bin" allreduce --collective all -b 8 -e 8G -f 2 --output-dir "$work/allreduce_all"
timed allreduce_2gpu 200 "$bin" allreduce --gpus 0,1 -b 8 -e 8G -f 2 --output-dir "$work/allreduce_2gpu"
timed allreduce_mpi 200 mpirun --allow-run-as-root --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE \
  "$bin" allreduce -b 64M -e 8G -f 2 --output-dir "$work/allreduce_mpi"
if [ "$ngpu" -gt 2 ]; then
  CUDA_VISIBLE_DEVICES=0,1 timed allreduce_mpi2 200 mpirun --allow-run-as-root --bind-to none -np 2 \
    -x NCCL_NVLS_ENABLE -x CUDA_VISIBLE_DEVICES "$bin" allreduce -b 64M -e 8G -f 2 \
    --output-dir "$work/allreduce_mpi2"
fi
timed allreduce_quick 120 "$bin" allreduce --quick --output-dir "$work/allreduce_quick"
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
grep -A12 "^Headline" "$work/allreduce_all.log" | head -20
tail -5 "$work/gpu_test_collectives.log"
