#!/usr/bin/env bash
# One command on a fresh GPU machine: install what is missing, build, run gpubench, chart the report.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

usage() {
  cat <<'EOF'
Usage: scripts/quick_start.sh [MODE] [gpubench options...]

Installs missing build dependencies (apt, as root), builds gpubench into build/, runs it, writes
charts for the report and prints the report's folder with its headline figures.

Modes:
  quick          every available benchmark, short settings (config/quick.ini)   [default]
  comprehensive  every available benchmark, full settings (config/default.ini)
  env            the system inventory: driver, GPUs, links, warnings
  bandwidth      HBM, host<->GPU and GPU<->GPU bandwidth and latency
  allreduce      NCCL collectives: busbw sweeps, verified (like nccl-tests)
  matmul         GEMM TFLOP/s and MFU per data type and size, verified
  sequence       LLM prefill/decode latency against sequence length and batch
  tp             tensor-parallel inference: speed-up and all-reduce cost (2+ GPUs)
  pp             pipeline-parallel inference and training: bubbles, schedules (2+ GPUs)

Options after the mode go to gpubench unchanged, e.g.
  scripts/quick_start.sh bandwidth --gpus 0,1 --tests hbm,p2p
Paths in them are relative to the repository root. Reports go to results/test_YYYYMMDD_HHMMSS/.

Environment: GPUBENCH_CUDA_ARCHS (e.g. 90) builds for those GPU architectures (default: those of
the GPUs present, else the project's list); only what the binary needs is installed;
GPUBENCH_SKIP_DEPS=1 skips the dependency check; GPUBENCH_SKIP_BUILD=1 runs the existing
build/gpubench without building (for machines where nothing can be installed).
Exit: 0 ok, 1 a benchmark, the build or a dependency failed, 2 bad input, 3 no usable GPU or
driver, 5 the node failed check's verdict.
EOF
}

say() { echo "quick_start: $*"; }

# The architectures of the GPUs present ("90", "80;90"), or "" (the project's list) when none
# answers: a build for this machine only is minutes shorter.
present_archs() {
  nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d '. ' |
    grep -E '^[0-9]+$' | sort -u | paste -sd';' || true
}

mode=quick
if (($# > 0)) && [[ "$1" != -* ]]; then
  mode=$1
  shift
elif (($# > 0)) && [[ "$1" == -h || "$1" == --help ]]; then
  usage
  exit 0
fi

case "$mode" in
  quick) command_args=(all --config config/quick.ini) ;;
  comprehensive) command_args=(all --config config/default.ini) ;;
  env | bandwidth | allreduce | matmul | seqlen | tp | pp) command_args=("$mode") ;;
  sequence) command_args=(seqlen) ;;
  help) usage && exit 0 ;;
  *)
    say "unknown mode '$mode' (modes: quick, comprehensive, env, bandwidth, allreduce, matmul," \
      "sequence, tp, pp; see --help)" >&2
    exit 2
    ;;
esac

# 1. Dependencies and build (incremental: only what changed is rebuilt).
binary="$repo/${GPUBENCH_BUILD_DIR:-build}/gpubench"
if [[ "${GPUBENCH_SKIP_BUILD:-0}" == 1 ]]; then
  say "GPUBENCH_SKIP_BUILD=1: running the existing $binary as it is"
elif ! bash scripts/install_deps.sh --run; then
  if [[ ! -x "$binary" ]]; then
    say "build dependencies are missing (see above); install them and run this again" >&2
    exit 1
  fi
  say "warning: cannot build here (see above); running the existing $binary as it is" >&2
elif ! GPUBENCH_CUDA_ARCHS=${GPUBENCH_CUDA_ARCHS:-$(present_archs)} bash scripts/build.sh \
  gpubench; then
  say "the build failed (see above)" >&2
  exit 1
fi
if [[ ! -x "$binary" ]]; then
  say "no gpubench binary at $binary: build it with scripts/build.sh" >&2
  exit 1
fi

# 2. Run, keeping stdout to find the report folder while the user still sees everything.
run_log=$(mktemp "${TMPDIR:-/tmp}/gpubench-quick-start.XXXXXX")
stamp="$run_log.start"
touch "$stamp"
trap 'rm -f "$run_log" "$stamp"' EXIT

say "running: gpubench ${command_args[*]}${*:+ $*}"
set +e
# tee ignores Ctrl-C so gpubench can still print and write what it finished (it stops cleanly).
"$binary" "${command_args[@]}" "$@" | (trap '' INT && exec tee "$run_log")
status=${PIPESTATUS[0]}
set -e

case "$status" in
  0 | 1) ;;
  2)
    say "gpubench rejected the input (see the message above)" >&2
    exit 2
    ;;
  3)
    say "no usable NVIDIA GPU or driver on this machine (gpubench exit 3): nothing to measure." >&2
    say "check that 'nvidia-smi' lists the GPUs and that the NVIDIA driver is loaded" >&2
    partial=$(sed -n 's/^report: //p' "$run_log" | tail -n 1)
    [[ -n "$partial" ]] && say "what could run without a GPU is in $partial" >&2
    exit 3
    ;;
esac

# 3. The report folder: the "report: <dir>" line, else the newest run folder of this run.
report_dir=$(sed -n 's/^report: //p' "$run_log" | tail -n 1)
if [[ -z "$report_dir" ]]; then
  report_dir=$(find results -mindepth 1 -maxdepth 1 -type d -name 'test_*' -newer "$stamp" \
    2>/dev/null | sort | tail -n 1)
fi
if [[ -z "$report_dir" || ! -d "$report_dir" ]]; then
  say "no report folder was written (gpubench exit $status)"
  exit "$status"
fi

# 4. Charts: an extra, never a reason to fail the run.
have_matplotlib() {
  python3 -c 'import matplotlib' >/dev/null 2>&1 ||
    { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; }
}
if ! have_matplotlib && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  say "installing python3-matplotlib for the charts"
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3-matplotlib; } >/dev/null 2>&1 || say "could not install python3-matplotlib"
fi
if have_matplotlib; then
  python3 scripts/plot_results.py "$report_dir" || say "some charts could not be drawn"
else
  say "charts skipped: matplotlib is not installed (sudo apt-get install python3-matplotlib)"
fi

# 5. Summary: each module's status and headline figures, read back from its JSON report.
echo
python3 - "$report_dir" <<'PY' || say "could not read the reports for the summary"
import json
import os
import sys

run_dir = sys.argv[1]


def number(value):
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:.4g}"


for entry in sorted(os.listdir(run_dir)):
    if not entry.endswith(".json"):
        continue
    try:
        with open(os.path.join(run_dir, entry), encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError):
        continue
    if not isinstance(report, dict) or report.get("schema") != "gpubench.result/1":
        continue
    module = report.get("module", entry[:-5])
    status = report.get("status", "?")
    why = f" ({report['error']})" if report.get("error") else ""
    print(f"{module}: status {status}{why}")
    for key, metric in (report.get("headline") or {}).items():
        if isinstance(metric, dict):
            unit = metric.get("unit", "")
            print(f"{module}: {key} = {number(metric.get('value'))}{' ' + unit if unit else ''}")
    warnings = report.get("warnings") or []
    if warnings:
        print(f"{module}: {len(warnings)} warning(s), see {entry[:-5]}.md")
PY

echo
say "report: $report_dir"
[[ -f "$report_dir/summary.md" ]] && say "summary: $report_dir/summary.md"
[[ -d "$report_dir/charts" ]] && say "charts: $report_dir/charts/"
if ((status == 1)); then
  say "some benchmarks failed (gpubench exit 1): see the report for why"
elif ((status == 5)); then
  say "the node failed its check (gpubench exit 5): see check.md in the report for why"
fi
exit "$status"
