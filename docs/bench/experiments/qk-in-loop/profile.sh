#!/bin/bash
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; [ -n "$NCU" ] || exit 3
for c in qwen3-next-80b-tp2,8,4,float16 qwen3.6-27b-tp2,8,4,float32 qwen3.6-27b-tp2,1,1,float16; do
  echo "=== $c"
  CASE=$c PYTHONPATH=src timeout 150 $NCU -k regex:caovan --launch-skip 8 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    python3 docs/bench/experiments/qk-in-loop/profile_case.py > $OUT/ncu-${c//,/_}.txt 2>&1
  echo rc=$?
  grep -E "caovan|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Block Limit" $OUT/ncu-${c//,/_}.txt | head -60
done
