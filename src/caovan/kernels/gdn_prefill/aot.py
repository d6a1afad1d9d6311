"""Ahead-of-time compilation of the GDN prefill kernels (no GPU needed), and the rules they must meet on sm_75.

Used by the prefill's sm_75 gate (``tests/kernels/test_prefill_sm75_gate.py``), as ``gdn_spec_decode/aot.py`` is by
the spec-decode one: both kernels compile with ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 75, 32))``,
specialised as ``entry.gdn_prefill`` launches them (``aot_signature.py``) at Qwen3.6-27B's per-GPU linear-attention
shape, and are judged on what matters on Turing: shared memory (<= 64 KiB per block), bf16 in the PTX (sm_75 has no
bf16 instructions), registers and spills (``ptxas -v``), and how many programs of a kernel an RTX 2080 Ti's SM holds.

Blocks per SM are computed as the CUDA occupancy calculator does (``gdn_spec_decode/occupancy.py``) with the RTX
2080 Ti's per-SM limits (64 K registers, 32 warps, 64 KiB shared memory, 16 blocks)::

    min(65536 // (ceil(32 * registers / 256) * 256) // num_warps, 32 // num_warps, 65536 // shared_bytes, 16)

The state kernel needs two of them: each program walks its sequence's chunks one after another, every step waiting on
its loads, and a second resident program is what keeps the SM busy meanwhile.

On sm_75 Triton 3.6 lowers every ``tl.dot`` to FMA (no tensor-core ``mma`` before sm_80): both operands are
converted to fp32 through shared memory and each thread holds its rows and columns of them over the whole reduction,
so the figures here are those of FMA dots, not of the sm_80+ code.

Each entry compiles for the oldest GPU that runs it (``target_for``): the sm75 entry for sm_75 with 16-bit activations
(the entry an RTX 2080 Ti runs), the sm80 entry, whose dots are meant for tensor cores, for sm_80; bf16 activations
for sm_80 at least, where the PTX does hold bf16. They would compile for sm_75 too (Triton 3.6 emulates bf16 there with
integer ops, so no ``.bf16`` appears in the PTX), but no Turing GPU runs a bf16 model.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget

from ..aot_signature import Ptr, ast_source
from ..gdn_spec_decode.occupancy import RTX_2080_TI, resident_programs_per_sm
from ..ptx_facts import compiled_ptx, ptx_has_bf16, ptxas_resource_usage, sm75_rule_problems
from .chunked_kernels import (
    _caovan_gdn_prefill_chunk_state_kernel,
    _caovan_gdn_prefill_merge_kernel,
    _caovan_gdn_prefill_output_kernel,
)
from .launch_configs import ALL_LAUNCH_CONFIGS, CHUNK, LAUNCH_CONFIGS, PrefillLaunchConfig, block_v_of
from .triton_kernels import _caovan_gdn_prefill_state_kernel, _caovan_gdn_prefill_wy_kernel

#: Every prefill kernel, in the order ``compile_prefill_kernels`` returns them (the chunked path's three only for an
#: entry that has one).
KERNEL_SOURCES = (
    _caovan_gdn_prefill_wy_kernel,
    _caovan_gdn_prefill_state_kernel,
    _caovan_gdn_prefill_merge_kernel,
    _caovan_gdn_prefill_chunk_state_kernel,
    _caovan_gdn_prefill_output_kernel,
)
#: As ``entry.KERNEL_NAMES``, without importing torch.
KERNEL_NAMES = tuple(fn.__name__ for fn in KERNEL_SOURCES)
#: The WY kernel as the chunked path launches it (``PAIRED``) is reported under its name with this suffix.
PAIRED_SUFFIX = "[PAIRED]"
#: What ``compile_prefill_kernels`` reports for an entry with a chunked path, in order.
COMPILED_NAMES = (*KERNEL_NAMES[:2], KERNEL_NAMES[0] + PAIRED_SUFFIX, *KERNEL_NAMES[2:])
#: The kernels that walk a sequence's chunks one after another: they need two programs per SM (below).
SERIAL_KERNEL_NAMES = (_caovan_gdn_prefill_state_kernel.__name__, _caovan_gdn_prefill_chunk_state_kernel.__name__)
_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
#: The state kernel's programs an SM must hold at once, where the grid has that many per SM (module docstring).
MIN_STATE_BLOCKS_PER_SM = 2


@dataclass(frozen=True)
class DtypeCombo:
    """Activations (q, k, v, beta, out: the model dtype) and the SSM state cache (--mamba-ssm-cache-dtype)."""

    activation: str
    ssm_state: str

    @property
    def name(self) -> str:
        return f"act={self.activation},ssm={self.ssm_state}"

    @property
    def has_bf16(self) -> bool:
        return "bfloat16" in (self.activation, self.ssm_state)

    @property
    def capability(self) -> tuple[int, int]:
        """The target the gate compiles for: sm_75, or sm_80 where an input is bf16 (see the module docstring)."""
        return (8, 0) if self.has_bf16 else (7, 5)


SUPPORTED_DTYPE_COMBOS: tuple[DtypeCombo, ...] = (
    DtypeCombo("float16", "float32"),  # Qwen3.5/3.6 configs asking for an fp32 SSM cache
    DtypeCombo("float16", "float16"),  # SM75 default (--dtype half)
    DtypeCombo("bfloat16", "float32"),  # newer GPUs only
)


@dataclass(frozen=True)
class ModelShape:
    """Per-GPU linear-attention shape: key heads H, value heads HV, head dims K and V."""

    name: str
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int = 128
    head_v_dim: int = 128


#: Qwen3.6-27B (16 key heads, 48 value heads, head dims 128) at TP=1 and TP=2.
QWEN36_27B_TP1 = ModelShape("qwen3.6-27b-tp1", 16, 48)
QWEN36_27B_TP2 = ModelShape("qwen3.6-27b-tp2", 8, 24)
SHAPES = (QWEN36_27B_TP1, QWEN36_27B_TP2)
#: Sequences in the batch the gate compiles for: any count but 1 gives this specialisation (1 folds to a constant).
EXAMPLE_NUM_SEQS = 4


@dataclass(frozen=True)
class LaunchVariant:
    """The call's choices that change the kernels' specialisation."""

    ssm_layout: str = "vk"  # vLLM's (V, K) per head: stride_sk == 1; "kv": stride_sv == 1
    indexed: bool = True  # state_indices and has_initial_state given (None otherwise: constexpr)
    l2norm: bool = True  # q/k normalised in kernel (vLLM <= 0.20); 0.21's fused prep hands them normalised

    @property
    def name(self) -> str:
        return f"ssm={self.ssm_layout},indexed={int(self.indexed)},l2norm={int(self.l2norm)}"


DEFAULT_VARIANT = LaunchVariant()
#: Variants the gate compiles besides the default (for the sm75 entry, 16-bit activations, TP=2).
EXTRA_VARIANTS: tuple[LaunchVariant, ...] = (
    LaunchVariant(ssm_layout="kv"),
    LaunchVariant(indexed=False),
    LaunchVariant(l2norm=False),
)


@dataclass(frozen=True)
class CompiledKernelInfo:
    kernel: str
    target: str  # "sm75", or "sm80" for bf16
    config: str  # launch config arch key
    dtypes: str
    shape: str
    variant: str
    num_warps: int
    num_stages: int
    block_v: int | None  # the state kernel's BV
    shared_bytes: int
    ptx_has_bf16: bool
    bf16_inputs: bool
    seconds: float
    registers: int | None = None  # from `ptxas -v` when Triton's ptxas can be found
    spill_bytes: int | None = None
    #: Resident on one RTX 2080 Ti SM (module docstring); None for another target or without a register count.
    blocks_per_sm: int | None = None
    grid_programs: int = 0  # at EXAMPLE_NUM_SEQS sequences of one chunk each (the WY grid grows with tokens)


def _launch_values(
    config: PrefillLaunchConfig, shape: ModelShape, dtypes: DtypeCombo, variant: LaunchVariant
) -> dict[str, dict]:
    """Every kernel's arguments as ``gdn_prefill`` passes them, by kernel name: q/k/v/out/g/beta contiguous
    (T, heads, dim) and (T, heads) as vLLM hands them to FLA (its views of mixed_qkv have other row strides,
    multiples of 16 here too, so the same specialisation), the state a slot of vLLM's cache, pages rounded up to
    4 KiB."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    act, ssm = dtypes.activation, dtypes.ssm_state
    page = -(-HV * V * K * _ELEMENT_BYTES[ssm] // 4096) * 4096 // _ELEMENT_BYTES[ssm]
    stride_sk, stride_sv = (1, K) if variant.ssm_layout == "vk" else (V, 1)
    ks = min(config.key_slice, triton.next_power_of_2(K))
    w_dtype = "float32" if config.fp32_dots else act
    chunked = config.chunked is not None
    attn_width = 2 * CHUNK if chunked else CHUNK
    vs = min(config.value_slice, triton.next_power_of_2(V))
    common = dict(
        GROUP=HV // H, K=K, V=V, KS=ks, NK=-(-K // ks), BT=CHUNK, L2NORM=variant.l2norm, FP32=config.fp32_dots
    )
    per_row = 3 if variant.l2norm else 1  # the gate cumsum, then 1 / |q| and 1 / |k| (entry.gdn_prefill)
    rows = dict(stride_qt=H * K, stride_qh=K, stride_kt=H * K, stride_kh=K, stride_wt=HV * K, stride_wh=K)
    rows.update(stride_ut=HV * V, stride_uh=V, stride_gct=HV * per_row, stride_gch=per_row)
    rows.update(stride_at=HV * attn_width)
    rows.update(stride_ah=attn_width, stride_ot=HV * V, stride_oh=V, stride_hc=HV * K * V, stride_hh=K * V)
    cache = dict(stride_slot=page, stride_sh=V * K, stride_sk=stride_sk, stride_sv=stride_sv)
    pointers = dict(
        q_ptr=Ptr(act),
        k_ptr=Ptr(act),
        v_ptr=Ptr(act),
        g_ptr=Ptr("float32"),
        beta_ptr=Ptr(act),
        cu_seqlens_ptr=Ptr("int32"),
        w_ptr=Ptr(w_dtype),
        u_ptr=Ptr("float32"),
        gc_ptr=Ptr("float32"),
        attn_ptr=Ptr("float32"),
        h_ptr=Ptr("float32"),
        out_ptr=Ptr(act),
        ssm_ptr=Ptr(ssm),
        state_indices_ptr=Ptr("int32") if variant.indexed else None,
        has_initial_state_ptr=Ptr("bool") if variant.indexed else None,
    )
    scalars = dict(num_seqs=EXAMPLE_NUM_SEQS, scale=K**-0.5, null_slot_max=0, stride_gt=HV, stride_gh=1)
    scalars.update(stride_vt=HV * V, stride_vh=V, stride_bt=HV, stride_bh=1)
    available = {**pointers, **scalars, **rows, **cache, **common}
    extra = {
        _caovan_gdn_prefill_wy_kernel: dict(VS=vs, PAIRED=False),
        _caovan_gdn_prefill_state_kernel: dict(BV=block_v_of(config.state.BV, V), WRITE_FINAL_STATE=True),
    }
    if chunked:
        extra[_caovan_gdn_prefill_merge_kernel] = dict(VS=vs)
        extra[_caovan_gdn_prefill_chunk_state_kernel] = dict(
            BV=block_v_of(config.chunked.state.BV, V), WRITE_FINAL_STATE=True
        )
        extra[_caovan_gdn_prefill_output_kernel] = dict(BV=block_v_of(config.chunked.output.BV, V))
    return {fn.__name__: {name: {**available, **more}[name] for name in fn.arg_names} for fn, more in extra.items()}


@dataclass(frozen=True)
class _Facts:
    shared_bytes: int
    registers: int | None
    spill_bytes: int | None
    ptx_has_bf16: bool
    seconds: float


#: One compile per distinct specialisation in a process: the WY kernel does not depend on the state's dtype, layout
#: or BV, and entries with equal options compile the same code.
_compiled: dict[tuple, _Facts] = {}


def target_for(config: PrefillLaunchConfig, dtypes: DtypeCombo) -> tuple[int, int]:
    """The oldest GPU that runs ``config`` with these dtypes: the entry's own architecture (a Turing GPU never runs
    the sm80 entry, whose 16-bit dots are meant for tensor cores), sm_80 at least for bf16."""
    return max(tuple(config.capability), dtypes.capability)


def _compile(fn, values: dict, options: dict, capability: tuple[int, int]) -> _Facts:
    source = ast_source(fn, values)
    key = (source.hash(), capability, tuple(sorted(options.items())))
    if key not in _compiled:
        t0 = time.perf_counter()
        compiled = triton.compile(
            source, target=GPUTarget("cuda", capability[0] * 10 + capability[1], 32), options=options
        )
        ptx = compiled_ptx(compiled)
        registers, spill_bytes = ptxas_resource_usage(ptx, capability)
        seconds = round(time.perf_counter() - t0, 3)
        _compiled[key] = _Facts(int(compiled.metadata.shared), registers, spill_bytes, ptx_has_bf16(ptx), seconds)
    return _compiled[key]


def compile_prefill_kernels(
    config: PrefillLaunchConfig,
    dtypes: DtypeCombo,
    variant: LaunchVariant = DEFAULT_VARIANT,
    shape: ModelShape = QWEN36_27B_TP2,
    capability: tuple[int, int] | None = None,
) -> list[CompiledKernelInfo]:
    """Compile the entry's kernels (WY, state, then the chunked path's where it has one: ``KERNEL_SOURCES``' order)
    for ``capability`` (default: the oldest GPU that runs this entry with these dtypes, ``target_for``); raises
    whatever Triton raises on failure."""
    capability = capability or target_for(config, dtypes)
    values = _launch_values(config, shape, dtypes, variant)
    HV, V = shape.num_v_heads, shape.head_v_dim
    # The grids of entry.gdn_prefill at EXAMPLE_NUM_SEQS sequences of one chunk (pair) each: (chunk slots, HV) and
    # (V / BV, HV, sequences) for the state kernels; the output kernel's (pair slots, HV, V / BV).
    launches = [
        (_caovan_gdn_prefill_wy_kernel, config.wy, None, 2 * EXAMPLE_NUM_SEQS * HV, False),
        (_caovan_gdn_prefill_state_kernel, config.state, config.state.BV, None, False),
    ]
    if config.chunked is not None:
        chunked = config.chunked
        # The chunked path launches the WY kernel PAIRED (its attention rows span two chunks): compiled both ways.
        launches += [
            (_caovan_gdn_prefill_wy_kernel, config.wy, None, 2 * EXAMPLE_NUM_SEQS * HV, True),
            (_caovan_gdn_prefill_merge_kernel, chunked.merge, None, 2 * EXAMPLE_NUM_SEQS * HV, False),
            (_caovan_gdn_prefill_chunk_state_kernel, chunked.state, chunked.state.BV, None, False),
            (_caovan_gdn_prefill_output_kernel, chunked.output, chunked.output.BV, None, False),
        ]
    infos = []
    for fn, launch, block_v, grid_programs, paired in launches:
        if block_v is not None:
            block_v = block_v_of(block_v, V)
            per_block = -(-V // block_v) * HV
            grid_programs = per_block * EXAMPLE_NUM_SEQS * (1 if fn.__name__ in SERIAL_KERNEL_NAMES else 2)
        options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages}
        arguments = {**values[fn.__name__], **({"PAIRED": True} if paired else {})}
        facts = _compile(fn, arguments, options, capability)
        per_sm = None
        if capability == (7, 5) and facts.registers is not None:
            per_sm = resident_programs_per_sm(facts.registers, launch.num_warps, facts.shared_bytes, RTX_2080_TI)
        infos.append(
            CompiledKernelInfo(
                kernel=fn.__name__ + (PAIRED_SUFFIX if paired else ""),
                target=f"sm{capability[0]}{capability[1]}",
                config=config.arch,
                dtypes=dtypes.name,
                shape=shape.name,
                variant=variant.name,
                num_warps=launch.num_warps,
                num_stages=launch.num_stages,
                block_v=block_v,
                shared_bytes=facts.shared_bytes,
                ptx_has_bf16=facts.ptx_has_bf16,
                bf16_inputs=dtypes.has_bf16,
                seconds=facts.seconds,
                registers=facts.registers,
                spill_bytes=facts.spill_bytes,
                blocks_per_sm=per_sm,
                grid_programs=grid_programs,
            )
        )
    return infos


def sm75_gate_matrix() -> list[tuple[PrefillLaunchConfig, DtypeCombo, ModelShape, LaunchVariant]]:
    """What the gate compiles: every launch configuration x dtype combination x shape in the default variant, plus
    the other variants for the sm75 entry with 16-bit activations at TP=2 (entries with equal options cost one
    compile: ``_compiled``)."""
    matrix = [
        (cfg, combo, shape, DEFAULT_VARIANT)
        for cfg in ALL_LAUNCH_CONFIGS
        for combo in SUPPORTED_DTYPE_COMBOS
        for shape in SHAPES
    ]
    sm75 = LAUNCH_CONFIGS["sm75"]
    matrix += [
        (sm75, combo, QWEN36_27B_TP2, variant)
        for combo in SUPPORTED_DTYPE_COMBOS
        if not combo.has_bf16
        for variant in EXTRA_VARIANTS
    ]
    return matrix


def gate_problems(infos: Iterable[CompiledKernelInfo]) -> list[str]:
    """Human-readable violations of the sm_75 rules (empty when the gate passes)."""
    problems = []
    for info in infos:
        where = f"{info.kernel} [{info.config}; {info.target}; {info.dtypes}; {info.shape}; {info.variant}]"
        problems += sm75_rule_problems(where, info.shared_bytes, info.ptx_has_bf16, info.bf16_inputs, info.spill_bytes)
        wants_two = info.grid_programs >= MIN_STATE_BLOCKS_PER_SM * RTX_2080_TI.multiprocessors
        if (
            info.kernel in SERIAL_KERNEL_NAMES
            and info.blocks_per_sm is not None
            and wants_two
            and info.blocks_per_sm < MIN_STATE_BLOCKS_PER_SM
        ):
            problems.append(
                f"{where}: {info.blocks_per_sm} block(s) per RTX 2080 Ti SM ({info.registers} registers x "
                f"{info.num_warps} warps, {info.shared_bytes} B shared), fewer than {MIN_STATE_BLOCKS_PER_SM}"
            )
    return problems
