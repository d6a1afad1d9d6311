#!/bin/bash
# Nsight Compute profile of the Q/K kernel alone at the one shape under 2x vLLM (Qwen3.6-27B TP=2, 8 sequences,
# MTP 4, fp32 state), at the GPU's own clocks, with per-SASS-instruction stall samples; as ../issue-profile/
# profile.sh does for the V/GDN kernel. Run from the repository root with PYTHONPATH=src and OUT set; writes
# OUT/details.txt, OUT/sass.csv and OUT/qk-metrics.txt (MTP 4 and MTP 1, one metrics pass each).
source docs/bench/experiments/ncu_profile.sh
find_ncu
ncu_full prepare_qk qk qwen3.6-27b-tp2,8,4,float32
M=gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_active.max,sm__cycles_active.avg
M=$M,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,launch__registers_per_thread
M=$M,smsp__average_warp_latency_per_inst_issued.ratio,smsp__inst_executed.sum
for c in qwen3.6-27b-tp2,8,4,float32 qwen3.6-27b-tp2,8,1,float32; do
  echo "== $c"
  CASE=$c timeout 100 "$NCU" -k regex:prepare_qk --launch-skip 4 --launch-count 1 --clock-control none --metrics "$M" \
    python3 docs/bench/experiments/qk-in-loop/profile_case.py 2>&1 | grep -E "^\s+(gpu__|sm__|smsp__|dram__|lts__|launch__)"
done | tee "$OUT/qk-metrics.txt"
