# Sourced by the experiments' profile.sh scripts (bash): the Nsight Compute steps they share.
# find_ncu: sets NCU (exit 3 without one). ncu_full REGEX NAME CASE: profiles the fifth launch of the kernels
# matching REGEX in ../qk-in-loop/profile_case.py at CASE (head,sequences,MTP,state dtype) with --set full and
# per-instruction stall sampling at the GPU's own clocks, and writes OUT/details.txt and OUT/sass.csv (Nsight's
# details page, and its source page as SASS CSV). Run from the repository root with PYTHONPATH=src and OUT set.

find_ncu() {
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"; [ -n "$NCU" ] || exit 3
  "$NCU" --version | tail -1
}

ncu_full() {
  local regex=$1 name=$2
  CASE=$3 timeout 300 "$NCU" -k "regex:$regex" --launch-skip 4 --launch-count 1 \
    --clock-control none --set full --import-source yes -f -o "$OUT/$name" \
    python3 docs/bench/experiments/qk-in-loop/profile_case.py > "$OUT/ncu-run.log" 2>&1
  echo "profile rc=$?"; tail -3 "$OUT/ncu-run.log"
  "$NCU" -i "$OUT/$name.ncu-rep" --page details > "$OUT/details.txt" 2>&1; echo "details rc=$?"
  "$NCU" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass > "$OUT/sass.csv" 2>&1; echo "sass rc=$?"
  rm -f "$OUT/$name.ncu-rep"
}
