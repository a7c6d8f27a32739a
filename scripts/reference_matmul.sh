#!/usr/bin/env bash
# Runs the GEMM GPU tests and the matmul reference benchmarks on a GPU machine and packs them.
# Usage: scripts/reference_matmul.sh OUT_DIR [MACHINE_NAME]   (GPUBENCH_BUILD_DIR: the build)
# GPUBENCH_MATMUL_STEPS (default "tests full repeat quick model burst mamf sustained peer") picks
# the steps; "peer" runs scripts/peers/torch_matmul.py when torch is there.
set -uo pipefail
out=${1:?usage: scripts/reference_matmul.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-machine}
build=${GPUBENCH_BUILD_DIR:-build}
bin=$PWD/$build/gpubench
export GPUBENCH_BINARY=$bin
steps=${GPUBENCH_MATMUL_STEPS:-tests full repeat quick model burst mamf sustained peer}
work=$(mktemp -d)/$machine
mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/reference_lib.sh"
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
has tests && timed gpu_test_gemm 300 "$build/tests/gpu_test_gemm"
has full && timed matmul_full 400 "$bin" matmul --output-dir "$work/matmul_full"
has repeat && timed matmul_repeat 200 "$bin" matmul --dtypes bf16,fp16,fp8_e4m3,tf32,fp32 \
  --sizes 4096,8192 --output-dir "$work/matmul_repeat"
has quick && timed matmul_quick 120 "$bin" matmul --quick --output-dir "$work/matmul_quick"
has model && timed matmul_model 200 "$bin" matmul --model llama-2-7b --tokens 4096 \
  --dtypes bf16,fp8_e4m3 --output-dir "$work/matmul_model"
has burst && timed matmul_burst 300 "$bin" matmul --burst --dtypes bf16,fp16,fp8_e4m3,tf32,fp32 \
  --sizes 2048,4096,8192,16384 --output-dir "$work/matmul_burst"
has mamf && timed matmul_mamf 400 "$bin" matmul --mamf --output-dir "$work/matmul_mamf"
has sustained && timed matmul_sustained 120 "$bin" matmul --dtypes bf16 --sizes 8192 \
  --sustained 30 --output-dir "$work/matmul_sustained"
has peer && python3 -c "import torch" 2>/dev/null &&
  timed torch_matmul 200 python3 scripts/peers/torch_matmul.py
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
for f in matmul_full matmul_burst matmul_mamf matmul_sustained; do
  [ -f "$work/$f.log" ] && grep -A30 "^Headline" "$work/$f.log" | head -40
done
tail -5 "$work/gpu_test_gemm.log" 2>/dev/null
cat "$work/torch_matmul.log" 2>/dev/null
