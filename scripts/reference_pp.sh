#!/usr/bin/env bash
# Runs the pipeline-parallel GPU tests and the `gpubench pp` reference runs on a machine with 2 or
# more GPUs and packs them. Usage: scripts/reference_pp.sh OUT_DIR [MACHINE_NAME]
# (GPUBENCH_BUILD_DIR: the build; GPUBENCH_PP_STEPS picks the steps, default
# "tests full ctas interleaved copy layouts mpi quick"; "mpi" needs mpirun).
set -uo pipefail
out=${1:?usage: scripts/reference_pp.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-machine}
export NCCL_NVLS_ENABLE=0
build=${GPUBENCH_BUILD_DIR:-build}
bin=$PWD/$build/gpubench
steps=${GPUBENCH_PP_STEPS:-tests full ctas interleaved copy layouts mpi quick}
work=$(mktemp -d)/$machine
mkdir -p "$work"
source "$(dirname "${BASH_SOURCE[0]}")/reference_lib.sh"
has() { [[ " $steps " == *" $1 "* ]]; }
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >"$work/topo.txt" 2>&1
has tests && timed gpu_test_pp_pipeline 300 "$build/tests/gpu_test_pp_pipeline"
has tests && timed gpu_test_training_kernels 120 "$build/tests/gpu_test_training_kernels"
# The issue's points: llama-2-7b, all layers, 16 x 1024 tokens a step, every stage count the
# GPUs allow, microbatches 1..16, GPipe and 1F1B, inference and training.
has full && timed pp_full 600 "$bin" pp --output-dir "$work/pp_full"
# Inference and training with NCCL held to 8 CTAs a transfer (its own choice is 32 per NVLink
# peer, which wait on SMs beside the GEMMs), every stage count the GPUs allow.
has ctas && timed pp_nccl_ctas8 500 "$bin" pp --microbatches 4,8,16 --nccl-ctas 8 \
  --output-dir "$work/pp_nccl_ctas8"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
# Interleaved 1F1B (2 chunks a stage) on every GPU, microbatches that are multiples of it.
has interleaved && timed pp_interleaved 400 "$bin" pp --pp "$ngpu" --workload training \
  --schedule interleaved --microbatches "$ngpu,$((2 * ngpu)),16" --output-dir "$work/pp_interleaved"
# Training's transfers over the copy engines (2 stages: what gpubench runs them on), every
# schedule.
has copy && timed pp_copy_engine 400 "$bin" pp --pp 2 --workload training --transfers copy-engine \
  --schedule gpipe,1f1b,interleaved --microbatches 4,8,16 --output-dir "$work/pp_copy_engine"
# Training over the copy engines on every GPU, past the 2-stage limit (GPUBENCH_PP_CE_ANY_STAGES;
# a stall is ended by --timeout). Not a default step: run it with GPUBENCH_PP_STEPS="ce_any".
has ce_any && timed pp_copy_engine_any 300 env GPUBENCH_PP_CE_ANY_STAGES=1 "$bin" pp --pp "$ngpu" \
  --workload training --transfers copy-engine --schedule gpipe,1f1b --microbatches 8,16 \
  --timeout 60 --log-level debug --output-dir "$work/pp_copy_engine_any"
# Every layout of the GPUs, one prompt and 16.
has layouts && timed pp_layouts 400 "$bin" pp --workload inference --microbatches 8,16 \
  --layouts all --output-dir "$work/pp_layouts"
# A process per GPU under mpirun (4 layers keep it short).
has mpi && command -v mpirun >/dev/null && timed pp_mpi 200 mpirun --allow-run-as-root \
  --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE "$bin" pp --workload training --layers 4 \
  --microbatches "$ngpu" --output-dir "$work/pp_mpi"
has quick && timed pp_quick 200 "$bin" pp --quick --output-dir "$work/pp_quick"
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
for f in pp_full pp_nccl_ctas8 pp_interleaved pp_copy_engine pp_copy_engine_any pp_layouts pp_quick; do
  [ -f "$work/$f.log" ] && grep -A8 "^Headline" "$work/$f.log" | head -10
done
grep -h "PASSED\|FAILED\|SKIPPED" "$work"/gpu_test_*.log 2>/dev/null
