#!/usr/bin/env bash
# Runs the transformer-engine GPU tests and the seqlen reference benchmarks on a GPU machine and
# packs them. Usage: scripts/reference_seqlen.sh OUT_DIR [MACHINE_NAME]
# (GPUBENCH_BUILD_DIR: the build; GPUBENCH_SEQLEN_STEPS picks the steps, default
# "tests full quick profile presets attention_own peer"; "peer" runs scripts/peers/hf_seqlen.py
# when torch is there).
set -uo pipefail
out=${1:?usage: scripts/reference_seqlen.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-machine}
build=${GPUBENCH_BUILD_DIR:-build}
bin=$PWD/$build/gpubench
export GPUBENCH_BINARY=$bin NCCL_NVLS_ENABLE=0
steps=${GPUBENCH_SEQLEN_STEPS:-tests full quick profile presets attention_own peer}
work=$(mktemp -d)/$machine
mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/reference_lib.sh"
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
if has tests; then
  for t in transformer_kernels attention decode_attention skinny_gemm cudnn_attention transformer; do
    timed "gpu_test_$t" 300 "$build/tests/gpu_test_$t"
  done
fi
has full && timed seqlen_full 500 "$bin" seqlen --output-dir "$work/seqlen_full"
has quick && timed seqlen_quick 120 "$bin" seqlen --quick --output-dir "$work/seqlen_quick"
has profile && timed seqlen_profile 120 "$bin" seqlen --seq-lens 2048 --batch-sizes 1 \
  --output-lens 50 --profile-layer --output-dir "$work/seqlen_profile"
if has presets; then
  for m in opt-125m gpt2-xl qwen2.5-7b qwen3-8b llama-3-8b llama-2-13b; do
    timed "seqlen_$m" 120 "$bin" seqlen --quick --model "$m" --output-dir "$work/seqlen_$m"
  done
fi
has attention_own && timed seqlen_attention_own 200 "$bin" seqlen --attention own \
  --seq-lens 2048,8192 --batch-sizes 1 --output-lens 50 --force-length \
  --output-dir "$work/seqlen_attention_own"
has peer && python3 -c "import torch" 2>/dev/null &&
  timed hf_seqlen 300 python3 scripts/peers/hf_seqlen.py llama-2-7b 512,2048,8192
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
for f in seqlen_full seqlen_quick seqlen_attention_own; do
  [ -f "$work/$f.log" ] && grep -A30 "^Headline" "$work/$f.log" | head -32
done
grep -h "PASSED\|FAILED" "$work"/gpu_test_*.log
cat "$work/hf_seqlen.log" 2>/dev/null
