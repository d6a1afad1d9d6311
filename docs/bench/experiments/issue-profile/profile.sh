#!/bin/bash
# Nsight Compute profile of the V/GDN kernel at the one shape under 2x vLLM (Qwen3.6-27B TP=2, 8 sequences, MTP 4,
# fp32 state), at the GPU's own clocks (--clock-control none), with per-SASS-instruction stall samples.
# Run from the repository root with PYTHONPATH=src and OUT set; writes OUT/details.txt and OUT/sass.csv.
source docs/bench/experiments/ncu_profile.sh
find_ncu
ncu_full fused_v_gdn v-gdn qwen3.6-27b-tp2,8,4,float32
# Per-SM balance (one pass, metrics only) at MTP 4 and MTP 3: writes OUT/sm-balance.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.max,sm__cycles_active.min,sm__cycles_active.avg
M=$M,sm__ctas_launched.max,sm__ctas_launched.min,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,dram__bytes_write.sum,dram__bytes_read.sum,lts__t_bytes.sum
for c in qwen3.6-27b-tp2,8,4,float32 qwen3.6-27b-tp2,8,3,float32; do
  CASE=$c timeout 120 "$NCU" -k regex:fused_v_gdn --launch-skip 4 --launch-count 1 --clock-control none --metrics "$M" \
    python3 docs/bench/experiments/qk-in-loop/profile_case.py 2>&1 | grep -E "^\s+(gpu__|sm__|dram__|lts__)|fused_v"
done | tee "$OUT/sm-balance.txt"
