"""The V/GDN kernel's row reductions as a transposed butterfly: the inline PTX and the layout it assumes.

Where the sm90 entry splits the state slab's rows over 16 lanes (``ROW_LANES == 16``, BV 16, one warp: see the
kernel), each thread holds 8 rows x 8 key columns. After the in-thread sums, Triton's own row reduction is 8 rows
x 4 shuffle rounds (32 shuffles and 32 adds per thread) for each of a token step's two dot products. Done as a
reduce-scatter instead (each exchange halves the rows a lane keeps: 4 + 2 + 1 shuffles, then 1 to complete the
sum over the 16 lanes), a row's total sits in 2 of its lanes after 8 shuffles; ``state . k`` then needs it back
in every lane of the row (8 indexed shuffles), ``state . q`` only in one lane, which stores the output: 24
shuffles per token step instead of 64. Measured on an H200 (docs/bench/kernel-design.md): 27B TP=2, 8 sequences,
fp32 state, MTP 4 19.77 -> 19.56 us, MTP 3 16.40 -> 16.02 us.

Triton cannot express which lane holds which element, so the PTX is written for the layout Triton 3.6 gives
the slab's partial sums at that launch (its TTGIR): lane bit 0 is the tile's ``RL`` axis, lane bits 1-4 its
``KT`` axis, and a thread's 8 partials are its rows ``rh = 0..7`` in register order. ``layout_problem`` checks a
compiled kernel's TTGIR for exactly that, and the launch entry uses the butterfly only where it holds (one line
in the log otherwise); ``simulate`` runs the PTX on 32 simulated lanes so that CPU tests check its arithmetic.
Remove it once Triton reduces several rows per thread this way by itself.
"""

from __future__ import annotations

import re

#: Marks the PTX in a TTGIR (``layout_problem``); a PTX comment, so it costs nothing.
MARKER = "// caovan row butterfly"
ROWS = 8  # rows per thread (RH), in register order
LANE_BITS = (1, 2, 3, 4)  # the lane bits of a row's 16 lanes (KT); bit 0 is RL


def own_row(lane: int) -> int:
    """The row (0..7 of the lane's RL half) whose total lane ``lane`` holds after the reduce-scatter."""
    return 4 * (lane >> 4 & 1) + 2 * (lane >> 3 & 1) + (lane >> 2 & 1)


def row_lane(lane: int, row: int) -> int:
    """A lane of ``lane``'s RL half that holds ``row``'s total after the reduce-scatter (lane bit 1 clear)."""
    return (lane & 1) | (row & 1) << 2 | (row >> 1 & 1) << 3 | (row >> 2 & 1) << 4


def ptx(broadcast: bool) -> str:
    """The reduction of 8 row partials per lane (inputs ``$8..$15``) to outputs ``$0..$7``.

    ``broadcast``: output j is row j's total (of the lane's RL half) in every lane; otherwise every output is the
    total of the lane's own row (``own_row``), which only one of each row's lanes (lane bit 1 clear) stores."""
    lines = [MARKER, "{", ".reg .pred %p;", ".reg .b32 %lid, %bit, %rl, %src;", ".reg .f32 %c<8>, %snd, %kp, %rcv;"]
    lines.append("mov.u32 %lid, %laneid;")
    lines += [f"mov.f32 %c{i}, ${ROWS + i};" for i in range(ROWS)]
    kept, mask = ROWS, 1 << LANE_BITS[-1]
    while kept > 1:
        half = kept // 2
        lines += [f"and.b32 %bit, %lid, {mask};", "setp.ne.u32 %p, %bit, 0;"]
        for i in range(half):
            # The lane with the bit set keeps the upper half of its rows and sends the lower half.
            lines += [
                f"selp.f32 %snd, %c{i}, %c{i + half}, %p;",
                f"selp.f32 %kp, %c{i + half}, %c{i}, %p;",
                f"shfl.sync.bfly.b32 %rcv, %snd, {mask}, 31, -1;",
                f"add.f32 %c{i}, %kp, %rcv;",
            ]
        kept, mask = half, mask >> 1
    lines += [f"shfl.sync.bfly.b32 %rcv, %c0, {1 << LANE_BITS[0]}, 31, -1;", "add.f32 %c0, %c0, %rcv;"]
    if broadcast:
        lines.append("and.b32 %rl, %lid, 1;")
        for row in range(ROWS):
            lines += [f"or.b32 %src, %rl, {row_lane(0, row)};", f"shfl.sync.idx.b32 ${row}, %c0, %src, 31, -1;"]
    else:
        lines += [f"mov.f32 ${j}, %c0;" for j in range(ROWS)]
    lines.append("}")
    return "\n".join(lines)


CONSTRAINTS = ",".join(["=f"] * ROWS + ["f"] * ROWS)


def simulate(text: str, partials: list[list[float]]) -> list[list[float]]:
    """Runs ``ptx``'s output on 32 lanes (``partials[lane][j]`` is input ``$8 + j``); returns each lane's outputs.

    Only the instructions ``ptx`` writes are understood; anything else raises ValueError."""
    regs = [{"%laneid": lane, **{f"${ROWS + j}": partials[lane][j] for j in range(ROWS)}} for lane in range(32)]
    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line.startswith(("//", "{", "}", ".reg")):
            continue
        op, args = line.split(None, 1)
        a = [x.strip() for x in args.split(",")]

        def val(lane: int, x: str):
            return regs[lane][x] if x[0] in "%$" else int(x)

        if op.startswith("shfl.sync"):
            sources = [(lane ^ val(lane, a[2])) if ".bfly" in op else val(lane, a[2]) for lane in range(32)]
            values = [val(src, a[1]) for src in sources]
            for lane in range(32):
                regs[lane][a[0]] = values[lane]
            continue
        for lane in range(32):
            r = regs[lane]
            if op in ("mov.u32", "mov.f32"):
                r[a[0]] = val(lane, a[1])
            elif op in ("and.b32", "or.b32"):
                x, y = val(lane, a[1]), val(lane, a[2])
                r[a[0]] = x & y if op == "and.b32" else x | y
            elif op == "setp.ne.u32":
                r[a[0]] = val(lane, a[1]) != val(lane, a[2])
            elif op == "selp.f32":
                r[a[0]] = val(lane, a[1]) if r[a[3]] else val(lane, a[2])
            elif op == "add.f32":
                r[a[0]] = val(lane, a[1]) + val(lane, a[2])
            else:
                raise ValueError(f"simulate: instruction {op!r} is not one ptx() writes")
    return [[regs[lane][f"${j}"] for j in range(ROWS)] for lane in range(32)]


# The layout of the partials (TTGIR): a slice over axes 5 then 4 of a one-warp blocked layout of the 6-D slab
# tile [RL, KT, 1, RH, KR, KS] with 2 x 16 lanes on RL and KT, RL first in the lane order, nothing but RH left
# in registers after the slices.
_BLOCKED = re.compile(r"^(#[\w]+) = #ttg\.blocked<\{(.*)\}>", re.M)


def layout_problem(ttgir: str) -> str | None:
    """None if every butterfly in this TTGIR reads partials laid out as the PTX assumes; else what differs."""
    operands = re.findall(
        re.escape(MARKER) + r'.*?" \{constraints = "[^"]*", packed_element = (\d+) : i32, pure = true\} %[\w.]+ : '
        r"tensor<([0-9x]+)xf32, #ttg\.slice<\{dim = 4, parent = #ttg\.slice<\{dim = 5, parent = (#\w+)\}>\}>>",
        ttgir,
    )
    found = ttgir.count(MARKER)
    if not operands or len(operands) != found:
        return f"{found} butterflies in the TTGIR, {len(operands)} with partials as a slice of axes 5 and 4"
    layouts = {name: body for name, body in _BLOCKED.findall(ttgir)}
    for pack, shape, parent in operands:
        if pack != str(ROWS) or shape != "2x16x1x8":
            return f"partials {shape} packed by {pack}: expected 2x16x1x8 packed by {ROWS}"
        body = layouts.get(parent, "")
        fields = dict(re.findall(r"(\w+) = \[([0-9, ]*)\]", body))
        ints = {k: [int(x) for x in v.split(",")] for k, v in fields.items()}
        if ints.get("threadsPerWarp") != [2, 16, 1, 1, 1, 1] or ints.get("warpsPerCTA") != [1] * 6:
            return f"{parent} = {body}: expected threadsPerWarp [2, 16, 1, 1, 1, 1] in one warp"
        if ints.get("sizePerThread", [0])[:4] != [1, 1, 1, 1]:
            return f"{parent} = {body}: expected one element per thread on axes 0-3"
        order = ints.get("order", [])
        if sorted(order) != list(range(6)) or order.index(0) > order.index(1):
            return f"{parent} = {body}: expected RL (axis 0) before KT (axis 1) in the lane order"
    return None
