#!/usr/bin/env bash
# Runs the transformer-engine GPU tests and the seqlen reference benchmarks on a GPU machine and
# packs them. Usage: scripts/reference_seqlen.sh OUT_DIR [MACHINE_NAME]
# (GPUBENCH_BUILD_DIR: the build; GPUBENCH_SEQLEN_STEPS picks the steps, default
# "tests full quick profile presets attention_own peer"; "peer" runs scripts/peers/hf_seqlen.py
# and scripts/peers/torch_compiled_decode.py when torch is there; "decode_ab", only on request,
# alternates batch-1 decode runs without (a) and with each environment assignment of
# GPUBENCH_DECODE_AB (VAR=VALUE, required by the step; several separated by ";" are b, c, ...),
# twice each, after the transformer GPU tests under each, and prints each run's decode ms per
# token; "trace", only on request, runs one batch-1 decode at
# context 2048 under GPUBENCH_KERNEL_TRACE, a libkernel_trace.so from
# scripts/diagnostics/build_kernel_trace.sh, and summarizes its kernel timeline with
# GPUBENCH_TRACE_PERIOD kernels a layer, default 6: 7 with GPUBENCH_DECODE_ATTENTION=separate).
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
if has decode_ab; then
  IFS=';' read -r -a abs <<<"${GPUBENCH_DECODE_AB:-}"
  for ab in "${abs[@]}"; do [[ "$ab" == *=* ]] || abs=(); done
  if (( ${#abs[@]} == 0 || ${#abs[@]} > 7 )); then
    echo "reference_seqlen.sh: the decode_ab step needs GPUBENCH_DECODE_AB=VAR=VALUE[;VAR=VALUE...] (1-7)" >&2
    exit 2
  fi
fi
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
if has decode_ab; then
  letters=(b c d e f g h)
  for k in "${!abs[@]}"; do
    echo "decode_ab: a = as is, ${letters[$k]} = ${abs[$k]}" | tee -a "$work/steps.log"
    timed "gpu_test_transformer_${letters[$k]}" 300 env ${abs[$k]} "$build/tests/gpu_test_transformer"
  done
  decode=(seqlen --seq-lens 512,2048,8192 --batch-sizes 1 --output-lens 50 --force-length)
  runs=()
  for i in 1 2; do
    timed "decode_a$i" 200 "$bin" "${decode[@]}" --output-dir "$work/decode_a$i"
    runs+=("a$i")
    for k in "${!abs[@]}"; do
      r=${letters[$k]}$i
      timed "decode_$r" 200 env ${abs[$k]} "$bin" "${decode[@]}" --output-dir "$work/decode_$r"
      runs+=("$r")
    done
  done
  for r in "${runs[@]}"; do
    python3 - "$work/decode_$r/seqlen.json" "$r" <<'PY' | tee -a "$work/steps.log"
import json, sys
try:
    h = json.load(open(sys.argv[1]))["headline"]
    ms = [h[f"decode_ms_ctx{c}"]["value"] for c in (512, 2048, 8192)]
    print(f"decode_{sys.argv[2]} ms/token at 512 / 2048 / 8192: " + " / ".join(f"{v:.3f}" for v in ms))
except (OSError, KeyError, ValueError) as e:
    print(f"decode_{sys.argv[2]}: no figures ({e})")
PY
  done
fi
if has trace; then
  if [[ -f "${GPUBENCH_KERNEL_TRACE:-}" ]]; then
    timed seqlen_trace 200 env CUDA_INJECTION64_PATH="$GPUBENCH_KERNEL_TRACE" \
      KTRACE_FILE="$work/kernel_trace.tsv" "$bin" seqlen --seq-lens 2048 --batch-sizes 1 \
      --output-lens 50 --force-length --output-dir "$work/seqlen_trace"
    python3 "$(dirname "${BASH_SOURCE[0]}")/diagnostics/kernel_timeline.py" \
      "$work/kernel_trace.tsv" --period "${GPUBENCH_TRACE_PERIOD:-6}" --offset 2 \
      >"$work/kernel_timeline_ctx2048.txt" 2>&1
    tail -9 "$work/kernel_timeline_ctx2048.txt" | tee -a "$work/steps.log"
    [ -f "$work/kernel_trace.tsv" ] && gzip -f "$work/kernel_trace.tsv"
  else
    echo "trace: GPUBENCH_KERNEL_TRACE does not name a libkernel_trace.so; skipped" |
      tee -a "$work/steps.log"
  fi
fi
if has peer && python3 -c "import torch" 2>/dev/null; then
  timed hf_seqlen 300 python3 scripts/peers/hf_seqlen.py llama-2-7b 512,2048,8192
  timed torch_compiled_decode 400 python3 scripts/peers/torch_compiled_decode.py llama-2-7b \
    512,2048,8192 30
fi
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
for f in seqlen_full seqlen_quick seqlen_attention_own; do
  [ -f "$work/$f.log" ] && grep -A30 "^Headline" "$work/$f.log" | head -32
done
grep -h "PASSED\|FAILED" "$work"/gpu_test_*.log
cat "$work/hf_seqlen.log" 2>/dev/null
grep -h "^check\|^torch.compile" "$work/torch_compiled_decode.log" 2>/dev/null
# Each step's exit status is in steps.log; the greps above find nothing for the steps not run.
exit 0
