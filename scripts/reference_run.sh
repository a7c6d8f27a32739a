#!/usr/bin/env bash
# Runs the GPU tests and the reference benchmarks on a GPU machine and packs the results.
# Usage: scripts/reference_run.sh OUT_DIR [MACHINE_NAME]
# Expects a built build/ (scripts/build.sh), or GPUBENCH_BUILD_DIR with gpubench and tests/. Writes OUT_DIR/<machine>.tar.gz with the run folders
# (JSON + Markdown), the logs and the wall times, and prints a short table last.
set -uo pipefail
out=${1:?usage: scripts/reference_run.sh OUT_DIR [MACHINE_NAME]}
machine=${2:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '_')}
export NCCL_NVLS_ENABLE=0
build=${GPUBENCH_BUILD_DIR:-build}
bin=$build/gpubench
work=$(mktemp -d)/$machine
mkdir -p "$work"
log() { echo "== $*" | tee -a "$work/steps.log"; }
timed() {  # name, command...: runs, records exit code and wall seconds
  local name=$1; shift
  local t0=$(date +%s.%N)
  "$@" >"$work/$name.log" 2>&1
  local rc=$?
  local t1=$(date +%s.%N)
  printf '%-28s rc=%-3s %8.2f s\n' "$name" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" | tee -a "$work/steps.log"
}
nvidia-smi >"$work/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >"$work/nvidia-smi-topo.txt" 2>&1
# The GPU tests run as plain executables (ctest files hold the build machine's paths).
export GPUBENCH_BINARY=$PWD/$bin
for t in "$build"/tests/gpu_test_*; do
  timed "$(basename "$t")" timeout 600 "$t"
done
timed env "$bin" env --output-dir "$work/env"
timed bandwidth_quick "$bin" bandwidth --quick --output-dir "$work/bandwidth_quick"
if [ -n "${GPUBENCH_EXTRA:-}" ]; then
  timed extra bash -c "$GPUBENCH_EXTRA"
fi
if [ "${GPUBENCH_FULL:-1}" = 1 ]; then
  timed bandwidth_full "$bin" bandwidth --output-dir "$work/bandwidth"
fi
tar -C "$(dirname "$work")" -czf "$out/$machine.tar.gz" "$machine"
cat "$work/steps.log"
tail -n 60 "$work/bandwidth_quick.log"
