#!/usr/bin/env bash
# Runs the GPU tests and the reference benchmarks that docs/RESULTS.md cites on a GPU machine,
# with the peers measured beside them, and packs the results for results/reference/<kind>/.
#
# Usage: scripts/reference.sh KIND OUT_DIR [STEP...]
#   KIND     h200 (one GPU), h200x2 or h200x4: names the folder and picks the default steps
#   OUT_DIR  where <kind>.tar.gz is written: one folder per step holding the step's report
#            (JSON + Markdown), logs/ with every step's console output, steps.log (exit code and
#            wall seconds of each step) and tests.txt (each GPU test's summary line)
#   STEP     any of the steps below; none: the kind's default list
# Environment: GPUBENCH_BUILD_DIR (default build) holds gpubench and tests/; PEERS_DIR, a folder
# with the peers' binaries built for this machine (nccl-tests' all_reduce_perf, BabelStream's
# cuda-stream, nvbandwidth), for the peer steps; REFERENCE_TESTS, a space-separated list of GPU
# test names (e.g. "pp_pipeline tp_engine"), limits the tests step.
#
# Steps (one GPU: tests env bandwidth matmul matmul_odd matmul_model seqlen seqlen_decode
# seqlen_quick compare check stress advise advise_train1 dp torch_matmul torch_decode babelstream
# nvbandwidth;
# h100: tests env bandwidth matmul compare check stress advise dp; several GPUs: tests env
# bandwidth allreduce allreduce_mpi small_latency tp pp compare check stress advise advise_70b dp
# quick_start nccl_tests nvbandwidth; not by default: sigterm sigterm_mpi hung_rank pp_schedules stress_long
# stress_gemm stress_live):
#   tests         every GPU test binary (ctest's files hold the build machine's paths)
#   env bandwidth allreduce matmul seqlen tp pp   the subcommand with its defaults
#   allreduce_mpi all_reduce 64 MiB..8 GiB, one process per GPU under mpirun
#   small_latency bf16 all_reduce of 8 B..64 KiB with CUDA graphs: NCCL, NCCL on symmetric windows
#                 (-R 2), the one-shot kernel; nccl-tests' all_reduce_perf the same two ways
#   matmul_odd    odd GEMM shapes (no 16-byte aligned leading dimension) of every dtype that
#                 takes them (fp8 and int8 need multiples of 16 and 4: gpu_test_gemm covers them)
#   matmul_model  llama-2-7b's GEMMs at 4096 tokens, bf16 and fp8
#   seqlen_decode batch-1 decode and prefill at 512, 2048 and 8192 tokens (the headline points)
#   seqlen_quick  seqlen --quick
#   compare       bandwidth --quick twice, the second run compared with the first
#   check         check --quick, check, check --from, and check --quick beside a GPU kept busy
#   advise        advise (llama-2-7b) beside seqlen's generation (one GPU: and training at 8
#                 layers); advise_train1 training every layer at one sequence a GPU;
#                 advise_70b llama-2-70b
#   dp            dp, llama-2-7b at 4 x 4096 tokens a GPU (one GPU: 8 layers; several: all)
#   stress        stress --quick; stress_long 9 minutes; stress_gemm the GEMM load beside matmul
#                 --sustained; stress_live the live view on a terminal (under script)
#   pp_schedules  pp training, m = 16: GPipe and 1F1B with NCCL's CTAs, with 4, over copy engines
#   quick_start   scripts/quick_start.sh (all --config config/quick.ini) on the existing build
#   sigterm sigterm_mpi  the all_reduce sweep stopped by SIGTERM (below)
#   hung_rank     the all_reduce sweep under mpirun with its last rank frozen (below)
#   torch_matmul torch_decode  PyTorch peers (scripts/peers/), when torch is there
#   nccl_tests    nccl-tests' all_reduce_perf beside allreduce: 8 B..8 GiB, plain and with graphs
#   babelstream   BabelStream's CUDA build, fp64, 2 GiB arrays as gpubench bandwidth uses
#   nvbandwidth   nvbandwidth's host<->device copies and, with several GPUs, its peer copies
set -uo pipefail
kind=${1:?usage: scripts/reference.sh KIND OUT_DIR [STEP...]}
out=${2:?usage: scripts/reference.sh KIND OUT_DIR [STEP...]}
shift 2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${GPUBENCH_BUILD_DIR:-$repo/build}" && pwd)
bin=$build/gpubench
export GPUBENCH_BINARY=$bin NCCL_NVLS_ENABLE=0
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
case "$kind" in
  h200) defaults="tests env bandwidth matmul matmul_odd matmul_model seqlen seqlen_decode seqlen_quick
      compare check stress advise advise_train1 dp torch_matmul torch_decode babelstream nvbandwidth" ;;
  h100) defaults="tests env bandwidth matmul compare check stress advise dp" ;;
  h200x2 | h200x4) defaults="tests env bandwidth allreduce allreduce_mpi small_latency tp pp
    compare check stress advise advise_70b dp quick_start nccl_tests nvbandwidth" ;;
  *) echo "reference.sh: unknown kind '$kind' (h100, h200, h200x2, h200x4)" >&2 && exit 2 ;;
esac
steps=" $(echo ${*:-$defaults}) "
work=$(mktemp -d)/$kind
mkdir -p "$work/logs"
has() { [[ "$steps" == *" $1 "* ]]; }

# timed NAME LIMIT CMD...: CMD's output in logs/NAME.log, its exit code and wall seconds in
# steps.log (and on stdout); SIGTERM at LIMIT seconds, SIGKILL 30 s later.
timed() {
  local name=$1 limit=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout -k 30 "$limit" "$@" >"$work/logs/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%-24s rc=%-3s %8.2f s\n' "$name" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" |
    tee -a "$work/steps.log"
  pack
}
# The archive is rewritten after every step, so a run cut short keeps the steps it finished.
pack() { tar -C "$(dirname "$work")" -czf "$out/$kind.tar.gz" "$kind"; }
gpb() {  # gpb STEP LIMIT ARGS...: gpubench ARGS with its reports in STEP/
  local name=$1 limit=$2
  shift 2
  timed "$name" "$limit" "$bin" "$@" --output-dir "$work/$name"
}

nvidia-smi >"$work/logs/nvidia-smi.txt" 2>&1
nvidia-smi topo -m >>"$work/logs/nvidia-smi.txt" 2>&1
"$bin" --version >>"$work/steps.log" 2>&1
if has tests; then
  for t in "$build"/tests/gpu_test_*; do
    [[ -z "${REFERENCE_TESTS:-}" || " $REFERENCE_TESTS " == *" ${t##*/gpu_test_} "* ]] || continue
    timed "$(basename "$t")" 400 "$t"
    printf '%-32s %s\n' "$(basename "$t")" \
      "$(grep -hE '^\[  (PASSED|FAILED|SKIPPED)|tests? (passed|failed)' "$work/logs/$(basename "$t").log" |
        tr '\n' ' ')" >>"$work/tests.txt"
  done
fi
has env && gpb env 60 env
has bandwidth && gpb bandwidth 400 bandwidth
has allreduce && gpb allreduce 600 allreduce --collective all -b 8 -e 8G -f 2
has allreduce_mpi && command -v mpirun >/dev/null && timed allreduce_mpi 300 mpirun \
  --allow-run-as-root --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE "$bin" allreduce -b 64M \
  -e 8G -f 2 --output-dir "$work/allreduce_mpi"
if has small_latency; then
  small=(allreduce -d bf16 -b 8 -e 64K -f 2 -G 100)
  gpb small_nccl 200 "${small[@]}"
  gpb small_symmetric 200 "${small[@]}" -R 2
  gpb small_one_shot 200 "${small[@]}" --impl one-shot
  if [[ -x "${PEERS_DIR:-/nonexistent}/all_reduce_perf" ]]; then
    timed nccl_tests_small 120 "$PEERS_DIR/all_reduce_perf" -d bfloat16 -b 8 -e 64K -f 2 \
      -g "$ngpu" -G 100
    timed nccl_tests_small_symmetric 120 "$PEERS_DIR/all_reduce_perf" -d bfloat16 -b 8 -e 64K \
      -f 2 -g "$ngpu" -G 100 -R 2
  fi
fi
has matmul && gpb matmul 400 matmul
has matmul_odd && gpb matmul_odd 300 matmul --shapes 8191x8193x4097,4095x4097x1023,1023x1025x513 \
  --dtypes fp64,fp32,tf32,fp16,bf16
has matmul_model && gpb matmul_model 300 matmul --model llama-2-7b --tokens 4096 \
  --dtypes bf16,fp8_e4m3
has seqlen && gpb seqlen 500 seqlen
has seqlen_decode && gpb seqlen_decode 200 seqlen --seq-lens 512,2048,8192 --batch-sizes 1 \
  --output-lens 50 --force-length
has seqlen_quick && gpb seqlen_quick 200 seqlen --quick
has tp && gpb tp 400 tp
has pp && gpb pp 500 pp
# pp_schedules: training alone, every layer, m = 16, GPipe and 1F1B over NCCL with its own CTA
# count and with 4 CTAs, and (2 stages) over the copy engines: what 1F1B loses to transfers whose
# kernels hold SMs beside the stage's compute.
if has pp_schedules; then
  train=(pp --workload training --microbatches 16 --schedule gpipe,1f1b)
  gpb pp_schedules 500 "${train[@]}"
  gpb pp_schedules_ctas4 500 "${train[@]}" --nccl-ctas 4
  ((ngpu >= 2)) && gpb pp_schedules_ce 300 "${train[@]}" --pp 2 --transfers copy-engine
fi
# check: check --quick, check, check --from the second run; then a busy GPU: another process
# holds a GEMM on GPU 2 (the last GPU on fewer than 3) while check --quick runs, against the
# first run as reference on one GPU (no median to hold it against there).
if has check; then
  gpb check_quick 300 check --quick
  gpb check 900 check
  gpb check_from 60 check --from "$work/check"
  busy=$((ngpu > 2 ? 2 : ngpu - 1))
  "$bin" matmul --gpus "$busy" --dtypes bf16 --shapes 8192x8192x8192 --sustained 600 \
    --no-files --log-level warn >"$work/logs/check_load.log" 2>&1 &
  load=$!
  sleep 8
  reference=()
  ((ngpu == 1)) && reference=(--reference "$work/check_quick")
  gpb check_busy 300 check --quick "${reference[@]}"
  kill -KILL "$load"  # a load, not a run: matmul's one-measurement hold outlasts SIGTERM
  wait "$load"
fi

# advise: llama-2-7b, every workload (latency, throughput at 8 and 32 sequences, training at 4 x
# 4096 tokens a GPU), beside seqlen's generation of the same shapes on one GPU (the baseline both
# run); one GPU also advise_train, training cut to 8 layers (no one GPU trains all 32);
# advise_70b: llama-2-70b (several GPUs only), latency and throughput at 8 sequences (with 32
# too, about 9 min: past one call), with 120 GiB a GPU, so that no GPU holds the whole model
# (one H200 would at 1 and 8 sequences): every layout is checked cut down to one GPU and against
# the others; on 4 GPUs as tp=4, tp=2 x pp=2 and pp=4. A stuck layout fails at 2 min.
if has advise; then
  gpb advise 500 advise
  gpb advise_seqlen 200 seqlen --seq-lens 1024 --batch-sizes 1,8,32 --output-lens 128
  ((ngpu == 1)) && gpb advise_train 300 advise --workload train --layers 8
fi
# advise_train1: every layer of llama-2-7b trained at one sequence of 4096 tokens a GPU, what one
# H200 holds (4 sequences need 167 GiB).
has advise_train1 && gpb advise_train1 300 advise --workload train --train-batch 1
if has advise_70b; then
  layouts=()
  ((ngpu == 4)) && layouts=(--layouts tp=4,tp=2xpp=2,pp=4)
  gpb advise_70b 540 advise --model llama-2-70b --workload latency,throughput --batch-sizes 8 \
    --memory 120 --timeout 120 \
    ${layouts[@]+"${layouts[@]}"}
fi

# dp: data-parallel training of llama-2-7b's shapes, 4 sequences of 4096 tokens a GPU, every
# strategy at 1, 2, 4 GPUs. One GPU: 8 layers, where every strategy's replica fits; several: every
# layer (a strategy a GPU cannot hold at a count is skipped, saying what it needs).
if has dp; then
  if ((ngpu == 1)); then gpb dp 400 dp --layers 8; else gpb dp 590 dp; fi
fi

# stress: the burn-in, --quick (60 s); stress_long: 9 minutes (what fits one 10-minute call of
# the GPU machines); stress_gemm: the GEMM load alone for 60 s, then matmul --sustained 60 on the
# same GPUs, for the sustained bf16 rate side by side; stress_live: 15 s under `script`, the live
# view as a terminal shows it (logs/stress_live.log keeps its escape sequences).
has stress && gpb stress 200 stress --quick
has stress_long && gpb stress_long 590 stress --duration 9m
if has stress_gemm; then
  gpb stress_gemm 200 stress --duration 60s --workload gemm
  gpb stress_gemm_matmul 200 matmul --dtypes bf16 --shapes 8192x8192x8192 --sustained 60
fi
has stress_live && command -v script >/dev/null && timed stress_live 100 script -qec \
  "'$bin' stress --duration 15s --no-files" /dev/null

# compare: bandwidth --quick twice on this machine, then the second run against the first with
# compare (nothing should regress), in compare/{base,new,report}/.
if has compare; then
  mkdir -p "$work/compare"
  timed compare_base 120 "$bin" bandwidth --quick --output-dir "$work/compare/base"
  timed compare_new 120 "$bin" bandwidth --quick --output-dir "$work/compare/new"
  timed compare 60 bash -c "cd '$work/compare' && '$bin' compare base new --output-dir report"
fi
# sigterm: the all_reduce sweep stopped by SIGTERM (as Slurm's time limit does) after SIGTERM_AFTER
# seconds (default 20): exit 143 and a partial report of the sizes that finished; sigterm_mpi
# the same under mpirun, the signal sent to mpirun, which passes it to every rank.
stopped() {  # stopped NAME CMD...: CMD in the background, SIGTERM after a while, its exit code
  local name=$1
  shift
  mkdir -p "$work/$name"
  "$@" --output-dir "$work/$name/report" >"$work/logs/$name.log" 2>&1 &
  local pid=$!
  sleep "${SIGTERM_AFTER:-20}"
  kill -TERM "$pid"
  wait "$pid"
  echo "exit code $? after SIGTERM at ${SIGTERM_AFTER:-20} s" | tee -a "$work/logs/$name.log" |
    sed "s/^/$name: /" | tee -a "$work/steps.log"
  pack
}
has sigterm && stopped sigterm "$bin" allreduce --collective all -b 8 -e 8G -f 2
has sigterm_mpi && command -v mpirun >/dev/null && stopped sigterm_mpi mpirun --allow-run-as-root \
  --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE "$bin" allreduce --collective all -b 8 -e 8G -f 2
# hung_rank: under mpirun, the last rank frozen (SIGSTOP, as a process stuck in the kernel is)
# HUNG_AFTER seconds (default 20) into the all_reduce sweep: the job must end by itself within
# the watchdog's limit (30 s: twice --timeout 10, at least 30), rank 0 writing the sizes
# finished before.
if has hung_rank && command -v mpirun >/dev/null && ((ngpu > 1)); then
  mkdir -p "$work/hung_rank"
  mpirun --allow-run-as-root --bind-to none -np "$ngpu" -x NCCL_NVLS_ENABLE "$bin" allreduce \
    --collective all -b 8 -e 8G -f 2 --timeout 10 --output-dir "$work/hung_rank/report" \
    >"$work/logs/hung_rank.log" 2>&1 &
  job=$!
  sleep "${HUNG_AFTER:-20}"
  victim=""
  for p in $(pgrep -f "^$bin allreduce"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null |
      grep -qx "OMPI_COMM_WORLD_RANK=$((ngpu - 1))" && victim=$p
  done
  t0=$(date +%s.%N)
  [[ -n "$victim" ]] && kill -STOP "$victim"
  ( sleep 120 && kill -KILL "$job" ) 2>/dev/null &
  guard=$!
  wait "$job"
  rc=$?
  t1=$(date +%s.%N)
  kill "$guard" 2>/dev/null
  [[ -n "$victim" ]] && kill -KILL "$victim" 2>/dev/null
  took=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
  echo "exit code $rc, $took s after rank $((ngpu - 1)) (pid ${victim:-none}) froze" |
    tee -a "$work/logs/hung_rank.log" | sed "s/^/hung_rank: /" | tee -a "$work/steps.log"
  pack
fi
has quick_start && GPUBENCH_SKIP_BUILD=1 timed quick_start 400 bash "$repo/scripts/quick_start.sh" \
  quick --output-dir "$work/quick_start"
if python3 -c "import torch" 2>/dev/null; then
  has torch_matmul && timed torch_matmul 300 python3 "$repo/scripts/peers/torch_matmul.py"
  has torch_decode && timed torch_decode 400 python3 "$repo/scripts/peers/torch_compiled_decode.py"
fi
peers=${PEERS_DIR:-/nonexistent}
if has nccl_tests && [[ -x "$peers/all_reduce_perf" ]]; then
  timed nccl_tests 300 "$peers/all_reduce_perf" -b 8 -e 8G -f 2 -g "$ngpu"
  timed nccl_tests_graph 200 "$peers/all_reduce_perf" -b 8 -e 128M -f 2 -g "$ngpu" -G 100
fi
# 2^28 fp64 elements: the 2 GiB arrays of gpubench bandwidth's HBM tests.
has babelstream && [[ -x "$peers/cuda-stream" ]] &&
  timed babelstream 120 "$peers/cuda-stream" --arraysize 268435456 --numtimes 100
if has nvbandwidth && [[ -x "$peers/nvbandwidth" ]]; then
  tests_nvb="host_to_device_memcpy_ce device_to_host_memcpy_ce"
  ((ngpu > 1)) && tests_nvb+=" device_to_device_memcpy_read_ce device_to_device_bidirectional_memcpy_read_ce
    device_to_device_memcpy_read_sm"
  timed nvbandwidth 300 "$peers/nvbandwidth" $(printf -- '-t %s ' $tests_nvb)
fi
pack
cat "$work/steps.log"
[[ -f "$work/tests.txt" ]] && cat "$work/tests.txt"
exit 0
