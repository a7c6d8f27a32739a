#!/usr/bin/env bash
# device run: GPU tests of bin/rb, batch 1..8 A/B (new vs GPUBENCH_DECODE_OUT=attention_start), seqlen full reference.
set -u
cd "$(dirname "$0")/.."
rm -rf build-carry/bin; mkdir -p build-carry/bin && tar xJf build-carry/bin.tar.xz -C build-carry/bin
B=$PWD/build-carry/bin/rb; R=$OUT/final; mkdir -p $R
export NCCL_NVLS_ENABLE=0
nvidia-smi > $R/nvidia-smi_seqlen.txt
t0=$(date +%s)
for t in transformer_kernels attention decode_attention skinny_gemm cudnn_attention transformer tp_engine; do
  s=$(date +%s); timeout -s KILL 200 $B/tests/gpu_test_$t > $R/gpu_test_$t.log 2>&1; rc=$?
  echo "gpu_test_$t rc=$rc $(( $(date +%s) - s )) s $(grep -E '^\[  (PASSED|FAILED|  SKIPPED)' $R/gpu_test_$t.log | tr '\n' ' ')" | tee -a $R/steps.log
done
pr() { python3 -c "
import json; d=json.load(open('$1/seqlen.json'))
print('$2', ' '.join('b%d/%d: %.3f' % (r['params']['batch'], r['params']['prompt'], r['metrics']['decode']['value']) for r in d['results'] if 'decode' in r['metrics']))" 2>&1 | tail -1; }
for c in new start; do
  ev=""; [[ $c == start ]] && ev="GPUBENCH_DECODE_OUT=attention_start"
  env $ev timeout -s KILL 150 $B/gpubench seqlen --seq-lens 2048,8192 --batch-sizes 1,2,4,8 --output-lens 50 --force-length --output-dir $R/ab_$c > $R/ab_$c.log 2>&1
  pr $R/ab_$c $c | tee -a $R/steps.log
done
left=$(( ${BUDGET:-560} - ($(date +%s) - t0) ))
echo "seqlen_full with ${left} s left" | tee -a $R/steps.log
s=$(date +%s); timeout -s KILL $left $B/gpubench seqlen --output-dir $R/seqlen_full > $R/seqlen_full.log 2>&1; rc=$?
echo "seqlen_full rc=$rc $(( $(date +%s) - s )) s" | tee -a $R/steps.log
python3 -c "
import json; h=json.load(open('$R/seqlen_full/seqlen.json'))['headline']
print({k: round(v['value'],3) for k,v in h.items() if 'decode' in k or 'prefill' in k})" 2>&1 | tail -1
rm -rf $R/ab_*/*.md
