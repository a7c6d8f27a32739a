#!/usr/bin/env bash
# device run: GPU tests of TESTBIN (a folder of bin/); decode/prefill A/B of CFGS; traces of TRACE.
#
set -u
cd "$(dirname "$0")/.."
rm -rf build-carry/bin; mkdir -p build-carry/bin && tar xJf build-carry/bin.tar.xz -C build-carry/bin
B=$PWD/build-carry/bin; R=/tmp/res; rm -rf $R; mkdir -p $R
export NCCL_NVLS_ENABLE=0
nvidia-smi > $R/nvidia-smi.txt
t0=$(date +%s)
for t in ${TESTS:-skinny_gemm transformer tp_engine}; do
  timeout -s KILL 200 $B/${TESTBIN:-.}/tests/gpu_test_$t > $R/gpu_test_$t.log 2>&1; echo "test $t rc=$? $(grep -E '^\[  (PASSED|FAILED|  SKIPPED)' $R/gpu_test_$t.log | tr '\n' ' ')"
done
grep -h "fused path" $R/gpu_test_skinny_gemm.log 2>/dev/null | sed 's/bf16 rows 1 //' | cut -c1-100
echo "tests took $(( $(date +%s) - t0 )) s"
read -r -a cfgs <<<"${CFGS:-new|$B/gpubench| pad0|$B/gpubench|GPUBENCH_WEIGHT_ROW_PAD=0 old|$B/old/gpubench|}"
for i in ${ROUNDS:-1 2}; do
  for c in "${cfgs[@]}"; do
    IFS='|' read -r name bin envs <<<"$c"
    env $envs timeout -s KILL 100 $bin seqlen --seq-lens ${LENS:-512,2048,8192} --batch-sizes 1 --output-lens 50 --force-length --output-dir $R/d_${name}_$i > $R/d_${name}_$i.log 2>&1
    python3 -c "
import json; h=json.load(open('$R/d_${name}_$i/seqlen.json'))['headline']
def g(k): return '%.3f'%h[k]['value'] if k in h else '-'
print('${name} $i: decode', ' / '.join(g('decode_ms_ctx%d'%c) for c in (512,2048,8192)), ' prefill', ' / '.join(g('prefill_ms_%d'%c) for c in (512,2048,8192)))" 2>&1 | tail -1
  done
done
KT=$PWD/build-carry/kt/libkernel_trace.so
for c in "${cfgs[@]}"; do
  IFS='|' read -r name bin envs <<<"$c"
  [[ " ${TRACE:-new} " == *" $name "* ]] || continue
  env $envs CUDA_INJECTION64_PATH=$KT KTRACE_FILE=$R/kt_$name.tsv timeout -s KILL 100 $bin seqlen --seq-lens 2048 --batch-sizes 1 --output-lens 50 --force-length --output-dir /tmp/tr_$name > $R/trace_$name.log 2>&1
  python3 scripts/diagnostics/kernel_timeline.py $R/kt_$name.tsv --period 6 --offset 2 > $R/timeline_${name}_ctx2048.txt 2>&1
  rm -f $R/kt_$name.tsv
  echo "trace $name:"; tail -8 $R/timeline_${name}_ctx2048.txt | cut -c1-95
done
rm -rf $R/d_*/*.md
tar czf $OUT/res.tar.gz -C /tmp res
echo "total $(( $(date +%s) - t0 )) s"
