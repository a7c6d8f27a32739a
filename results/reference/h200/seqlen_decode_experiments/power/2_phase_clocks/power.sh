#!/usr/bin/env bash
# device run: clocks, power and clock-event reasons every 10 ms around seqlen runs of bin/rb.
set -u
cd "$(dirname "$0")/.."
rm -rf build-carry/bin; mkdir -p build-carry/bin && tar xJf build-carry/bin.tar.xz -C build-carry/bin
B=$PWD/build-carry/bin/rb; R=$OUT/power; mkdir -p $R
export NCCL_NVLS_ENABLE=0
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi -q -d POWER > $R/nvidia-smi-q-power.txt 2>&1
for t in $B/tests/gpu_test_*; do timeout -s KILL 200 $t > $R/$(basename $t).log 2>&1; echo "$(basename $t) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/$(basename $t).log)" | tee -a $R/steps.txt; done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv -lms 10 > $R/smi.csv 2>&1 &
P=$!
sleep 1
for i in 1 2; do
  echo "run$i start $(date +%H:%M:%S.%N)" >> $R/steps.txt
  $B/gpubench seqlen --seq-lens 512,2048,8192 --batch-sizes 1 --output-lens 50 --force-length --output-dir $R/run$i > $R/run$i.log 2>&1
  echo "run$i rc=$? end $(date +%H:%M:%S.%N)" >> $R/steps.txt
  sleep 2
done
kill $P
cat $R/steps.txt
tar czf $OUT/power.tar.gz -C $OUT power && rm -rf $R
