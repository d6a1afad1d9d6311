"""Stall samples of Nsight Compute's source page (SASS, CSV) summed by reason and by part of the V/GDN kernel.

Usage: stall_summary.py sass-27b-b8-mtp4-fp32-h200.csv. Parts: instructions executed once per program (prologue,
epilogue) and those executed once per token (the token loop: executed count a multiple of the program count).
"""

import csv
import sys


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


rows = list(csv.reader(open(sys.argv[1])))
header = rows[1]
data = [dict(zip(header, r, strict=True)) for r in rows[2:] if len(r) == len(header)]
reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
programs = max(number(d["Instructions Executed"]) for d in data[:5])
total = sum(number(d["Warp Stall Sampling (All Samples)"]) for d in data)
print(f"{len(data)} SASS instructions, {total:.0f} samples, {programs:.0f} programs")
by_reason = {r: sum(number(d[r]) for d in data) for r in reasons}
for r, v in sorted(by_reason.items(), key=lambda kv: -kv[1])[:10]:
    print(f"  {r:22s} {v:6.0f}  {100 * v / total:5.1f} %")
loop = [d for d in data if number(d["Instructions Executed"]) > programs]
in_loop = sum(number(d["Warp Stall Sampling (All Samples)"]) for d in loop)
print(f"token loop: {len(loop)} instructions, {in_loop:.0f} samples ({100 * in_loop / total:.1f} %)")
for kind in ("LDG", "STG", "SHFL", "BAR"):
    picked = [d for d in loop if d["Source"].strip().lstrip("@!P0123456789 ").startswith(kind)]
    print(
        f"  {kind:5s} {len(picked):3d} instructions in the loop, samples at them: "
        f"{sum(number(d['Warp Stall Sampling (All Samples)']) for d in picked):.0f}"
    )
top = sorted(data, key=lambda d: -number(d["Warp Stall Sampling (All Samples)"]))[:8]
print("most sampled instructions:")
for d in top:
    main = max(reasons, key=lambda r: number(d[r]))
    print(
        f"  {number(d['Warp Stall Sampling (All Samples)']):5.0f} {main:16s} x{number(d['Instructions Executed']):6.0f}"
        f"  {d['Source'].strip()[:60]}"
    )
