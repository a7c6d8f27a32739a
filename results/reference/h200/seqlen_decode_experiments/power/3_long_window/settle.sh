#!/usr/bin/env bash
# device run: decode measured for a short window (default) and a long one (--min-time), smi at 10 ms.
set -u
cd "$(dirname "$0")/.."
rm -rf build-carry/bin; mkdir -p build-carry/bin && tar xJf build-carry/bin.tar.xz -C build-carry/bin
B=$PWD/build-carry/bin/rb; R=$OUT/settle; mkdir -p $R
export NCCL_NVLS_ENABLE=0
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 10 > $R/smi.csv 2>&1 &
P=$!
sleep 1
run() { echo "$1 start $(date +%H:%M:%S.%N)" >> $R/steps.txt; shift; n=$1; shift
  $B/gpubench seqlen --seq-lens 2048,8192 --batch-sizes 1 --output-lens 50 --force-length --log-level debug "$@" --output-dir $R/$n > $R/$n.log 2>&1
  echo "$n rc=$? end $(date +%H:%M:%S.%N)" >> $R/steps.txt; sleep 2; }
run a default_1
run b long_1 --min-time 4 --max-time 6
run a default_2
run b long_2 --min-time 4 --max-time 6
kill $P
for n in default_1 long_1 default_2 long_2; do python3 -c "
import json; d=json.load(open('$R/$n/seqlen.json'))
for r in d['results']:
  m=r['metrics']
  if 'decode' in m: print('$n', r['params']['prompt'], 'pre %.2f dec %.3f'%(m['prefill']['value'], m['decode']['value']), {k:m[k]['value'] for k in m if 'clock' in k})
"; done | tee -a $R/steps.txt
tar czf $OUT/settle.tar.gz -C $OUT settle && rm -rf $R
