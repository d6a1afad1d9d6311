"""Ahead-of-time compilation of the GDN spec-decode kernels (no GPU needed).

Used by the sm_75 gate test and by ``caovan doctor``: compiles both kernels with
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 75, 32))`` for a launch configuration,
a dtype combination and a cache layout, and reports what matters on Turing: shared memory
(<= 64 KiB per block on sm_75), whether bf16 slipped into the PTX (sm_75 has no bf16
instructions; an fp16 model must not need any), registers and spills (from ``ptxas -v``).

The signature handed to the compiler mirrors what a real launch of ``gdn_spec_decode``
specialises on (Triton's launch-time rules): pointers 16-byte aligned, integer arguments equal
to 1 folded to constexpr, integers divisible by 16 marked ``tt.divisibility=16``, ``None``
arguments constexpr (``kernels/aot_signature.py``, shared with the prefill gate). The argument
values come from the vLLM 0.21.0 cache layouts of a real model shape
(Qwen3.6-27B at TP=2 with MTP=3 by default), so the compiled code is the code users run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace

import triton
from triton.backends.compiler import GPUTarget

from ..aot_signature import Ptr as _Ptr
from ..aot_signature import ast_source as _ast_source
from ..ptx_facts import compiled_ptx, ptx_has_bf16, ptxas_resource_usage, sm75_rule_problems
from . import row_butterfly
from .launch_configs import ALL_LAUNCH_CONFIGS, ArchLaunchConfig
from .occupancy import value_block_candidates
from .triton_kernels import (
    _caovan_sm75_fused_v_gdn_spec_decode_kernel,
    _caovan_sm75_prepare_qk_conv_spec_decode_kernel,
)

_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class DtypeCombo:
    """Dtypes of one deployment: activations (mixed_qkv, a, b, conv weight/bias, dt_bias, out,
    as the model dtype), conv state (--mamba-cache-dtype), SSM state (--mamba-ssm-cache-dtype)."""

    activation: str
    conv_state: str
    ssm_state: str

    @property
    def name(self) -> str:
        return f"act={self.activation},conv={self.conv_state},ssm={self.ssm_state}"

    @property
    def has_bf16(self) -> bool:
        return "bfloat16" in (self.activation, self.conv_state, self.ssm_state)


#: Every dtype combination the kernels support and the gate compiles.
SUPPORTED_DTYPE_COMBOS: tuple[DtypeCombo, ...] = (
    DtypeCombo("float16", "float16", "float16"),  # SM75 default (--dtype half)
    DtypeCombo("float16", "float16", "float32"),  # Qwen3.5 configs asking for an fp32 SSM cache
    DtypeCombo("float16", "float32", "float32"),
    DtypeCombo("float32", "float32", "float32"),
    DtypeCombo("bfloat16", "bfloat16", "bfloat16"),  # newer GPUs only
    DtypeCombo("bfloat16", "bfloat16", "float32"),
)


@dataclass(frozen=True)
class ModelShape:
    """Per-GPU GDN shape: key heads H, value heads HV, head dims K/V, conv width, T_max."""

    num_k_heads: int = 8
    num_v_heads: int = 24
    head_k_dim: int = 128
    head_v_dim: int = 128
    conv_width: int = 4
    t_max: int = 4  # 1 + num_speculative_tokens (MTP=3)

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim


#: Qwen3.6-27B / Qwen3.5-27B per GPU at TP=2, MTP=3: the Turbo3 deployment.
QWEN36_27B_TP2_MTP3 = ModelShape()


@dataclass(frozen=True)
class LayoutVariant:
    """Cache layout and optional inputs; each choice changes the kernels' specialisation."""

    conv_dim_first: bool = False  # vLLM 0.21 default: (blocks, L, dim) cache, passed transposed
    ssm_layout: str = "vk"
    has_token_index: bool = False  # mixed prefill + spec batches
    has_bias: bool = False  # Qwen GDN conv1d has no bias
    index_dtype: str = "int32"

    @property
    def name(self) -> str:
        return (
            f"conv={'dim-first' if self.conv_dim_first else 'transposed'},"
            f"ssm={self.ssm_layout},token_index={int(self.has_token_index)},"
            f"bias={int(self.has_bias)},index={self.index_dtype}"
        )


DEFAULT_LAYOUT = LayoutVariant()
#: Layouts the gate compiles besides the default (once, for the SM75 config and fp16).
EXTRA_LAYOUTS: tuple[LayoutVariant, ...] = (
    LayoutVariant(conv_dim_first=True),
    LayoutVariant(ssm_layout="kv"),
    LayoutVariant(has_token_index=True, index_dtype="int64"),
    LayoutVariant(has_bias=True),
)


@dataclass(frozen=True)
class CompiledKernelInfo:
    kernel: str
    target: str  # "sm75"
    config: str  # launch config arch key
    dtypes: str
    layout: str
    num_warps: int
    num_stages: int
    shared_bytes: int
    ptx_has_bf16: bool
    bf16_inputs: bool
    seconds: float
    registers: int | None = None  # from `ptxas -v` when Triton's ptxas can be found
    spill_bytes: int | None = None
    #: Where the kernel reduces rows with ``row_butterfly``: what of its TTGIR differs from the layout the PTX
    #: assumes (None: as assumed, or no butterfly).
    butterfly_layout_problem: str | None = None


def _page_elements(bytes_needed: int, element_bytes: int) -> int:
    # vLLM's hybrid allocator gives every layer the same page size (a multiple of the block
    # alignment); any page larger than the state works for the specialisation, 16-aligned.
    page_bytes = -(-bytes_needed // 4096) * 4096
    return page_bytes // element_bytes


def _launch_values(
    shape: ModelShape,
    dtypes: DtypeCombo,
    layout: LayoutVariant,
    BV: int,
    use_pdl: bool = False,
    write_through_last: bool = False,
    constant_slab_offsets: bool = False,
    row_lanes: int = 32,
    row_butterfly: bool = False,
) -> tuple[dict[str, object], dict[str, object]]:
    """Argument values of both kernels as gdn_spec_decode would pass them for this layout."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    W, T = shape.conv_width, shape.t_max
    conv_dim, state_len = shape.conv_dim, W - 2 + T
    act, idx = dtypes.activation, layout.index_dtype
    conv_page = _page_elements(
        conv_dim * state_len * _ELEMENT_BYTES[dtypes.conv_state], _ELEMENT_BYTES[dtypes.conv_state]
    )
    if layout.conv_dim_first:
        s_cs = (conv_page, state_len, 1)  # (block, dim, pos)
    else:
        s_cs = (conv_page, 1, conv_dim)  # transposed view of (blocks, L, dim)
    ssm_page = _page_elements(HV * V * K * _ELEMENT_BYTES[dtypes.ssm_state], _ELEMENT_BYTES[dtypes.ssm_state])
    # (block, head, v, k) strides for either storage order
    s_ssm = (ssm_page, V * K, K, 1) if layout.ssm_layout == "vk" else (ssm_page, K * V, 1, V)
    BK = triton.next_power_of_2(K)
    BV = min(triton.next_power_of_2(BV), triton.next_power_of_2(V))
    BU = triton.next_power_of_2(W - 2 + T)
    BT = triton.next_power_of_2(T)
    x_row = conv_dim + HV * V  # Qwen3.5: mixed_qkv is the [q|k|v] part of the qkvz projection
    common = dict(
        mixed_qkv_ptr=_Ptr(act),
        conv_weight_ptr=_Ptr(act),
        conv_bias_ptr=_Ptr(act) if layout.has_bias else None,
        conv_state_ptr=_Ptr(dtypes.conv_state),
        query_start_loc_ptr=_Ptr(idx),
        state_indices_ptr=_Ptr(idx),
        num_accepted_tokens_ptr=_Ptr(idx),
        token_index_ptr=_Ptr(idx) if layout.has_token_index else None,
        qk_scratch_ptr=_Ptr("float32"),
        stride_x_token=x_row,
        stride_w_dim=W,
        stride_w_width=1,
        stride_cs_block=s_cs[0],
        stride_cs_dim=s_cs[1],
        stride_cs_pos=s_cs[2],
        stride_si_seq=T,
        H=H,
        K=K,
        BK=BK,
        WIDTH=W,
        BU=BU,
        NULL_SLOT_MAX=0,
        HAS_BIAS=layout.has_bias,
        HAS_TOKEN_INDEX=layout.has_token_index,
        USE_PDL=use_pdl,
    )
    qk = dict(common, scale=float(K) ** -0.5)
    v_gdn = dict(
        common,
        a_ptr=_Ptr(act),
        b_ptr=_Ptr(act),
        A_log_ptr=_Ptr("float32"),
        dt_bias_ptr=_Ptr(act),
        ssm_state_ptr=_Ptr(dtypes.ssm_state),
        out_ptr=_Ptr(act),
        stride_a_token=HV,
        stride_a_head=1,
        stride_b_token=HV,
        stride_b_head=1,
        stride_ssm_block=s_ssm[0],
        stride_ssm_head=s_ssm[1],
        stride_ssm_v=s_ssm[2],
        stride_ssm_k=s_ssm[3],
        stride_out_token=HV * V,
        stride_out_head=V,
        HV=HV,
        V=V,
        BV=BV,
        BT=BT,
        STAGGER=use_pdl,  # a full batch's launch staggers wherever it is a programmatic dependent (the superset)
        WRITE_THROUGH_LAST=write_through_last,
        CONST_SLAB_OFFSETS=constant_slab_offsets,
        SLAB_STRIDE_V=s_ssm[2] if constant_slab_offsets else 0,
        SLAB_STRIDE_K=s_ssm[3] if constant_slab_offsets else 0,
        ROW_LANES=row_lanes,
        ROW_BUTTERFLY=row_butterfly,
    )
    return qk, v_gdn


def compile_spec_decode_kernels(
    config: ArchLaunchConfig,
    dtypes: DtypeCombo,
    layout: LayoutVariant = DEFAULT_LAYOUT,
    shape: ModelShape = QWEN36_27B_TP2_MTP3,
    capability: tuple[int, int] = (7, 5),
) -> list[CompiledKernelInfo]:
    """Compile both kernels for one GPU target; raises whatever Triton raises on failure."""
    target = GPUTarget("cuda", capability[0] * 10 + capability[1], 32)
    # As gdn_spec_decode does: programmatic dependent launch only where the target has it.
    use_pdl = config.pdl_on(capability)
    # As for the stagger: the entry's write-through of the last token wherever it can turn it on (the superset).
    write_through_last = config.write_through_last_min_state_write_bytes is not None
    # And the slab's rows split wherever the entry can turn that on: at its split block, with an fp32 state.
    split_rows = splits_rows(config, dtypes)
    # The V/GDN launch at the entry's BV, with the options the entry gives that block (see launch_configs.py).
    v_launch = config.v_gdn.at_block(config.v_gdn.BV, split_rows)
    qk_values, v_values = _launch_values(
        shape,
        dtypes,
        layout,
        v_launch.BV,
        use_pdl,
        write_through_last,
        v_launch.preferred_block_constant_slab_offsets,
        v_launch.row_lanes_for(v_launch.BV, split_rows),
        v_launch.row_butterfly_for(v_launch.BV, split_rows),
    )
    launches = (
        (_caovan_sm75_prepare_qk_conv_spec_decode_kernel, qk_values, config.qk),
        (_caovan_sm75_fused_v_gdn_spec_decode_kernel, v_values, v_launch),
    )
    infos = []
    for fn, values, launch in launches:
        t0 = time.perf_counter()
        options = {"num_warps": launch.num_warps, "num_stages": launch.num_stages, "launch_pdl": use_pdl}
        if getattr(launch, "maxnreg", None) is not None:  # the V/GDN kernel's entry may cap its registers
            options["maxnreg"] = launch.maxnreg
        compiled = triton.compile(_ast_source(fn, values), target=target, options=options)
        ptx = compiled_ptx(compiled)
        registers, spill_bytes = ptxas_resource_usage(ptx, capability)
        butterfly_problem = None
        if values.get("ROW_BUTTERFLY"):
            butterfly_problem = row_butterfly.layout_problem(compiled.asm["ttgir"])
        infos.append(
            CompiledKernelInfo(
                kernel=fn.__name__,
                target=f"sm{capability[0]}{capability[1]}",
                config=config.arch,
                dtypes=dtypes.name,
                layout=layout.name,
                num_warps=launch.num_warps,
                num_stages=launch.num_stages,
                shared_bytes=int(compiled.metadata.shared),
                ptx_has_bf16=ptx_has_bf16(ptx),
                bf16_inputs=dtypes.has_bf16,
                seconds=round(time.perf_counter() - t0, 3),
                registers=registers,
                spill_bytes=spill_bytes,
                butterfly_layout_problem=butterfly_problem,
            )
        )
    return infos


def splits_rows(config: ArchLaunchConfig, dtypes: DtypeCombo) -> bool:
    """Whether a launch of this configuration at its own BV splits the slab's rows for some call with these dtypes
    (the entry's split block and an fp32 state: ``ArchLaunchConfig.row_split_on``)."""
    return (
        config.row_split_min_state_write_bytes is not None
        and config.v_gdn.splits_rows(config.v_gdn.BV, True)
        and _ELEMENT_BYTES[dtypes.ssm_state] == 4
    )


def runtime_launch_configs(shape: ModelShape = QWEN36_27B_TP2_MTP3) -> list[ArchLaunchConfig]:
    """Every configuration a launch can run with: each entry as written, then each entry with a larger value
    block that the one-wave rule (``occupancy.py``) may switch to at this shape, then the entry at its row-split
    block with the split (for fp32 states only: ``splits_rows``)."""
    configs = list(ALL_LAUNCH_CONFIGS)
    block_k, block_v_max = triton.next_power_of_2(shape.head_k_dim), triton.next_power_of_2(shape.head_v_dim)
    for cfg in ALL_LAUNCH_CONFIGS:
        v = cfg.v_gdn
        for bv in value_block_candidates(v.BV, block_k, v.num_warps, block_v_max)[1:]:
            configs.append(replace(cfg, v_gdn=v.at_block(bv), note=f"{cfg.arch} entry with BV={bv} (one-wave rule)"))
        if cfg.row_split_min_state_write_bytes is not None:
            bv = v.row_split_block
            note = f"{cfg.arch} entry with BV={bv}, rows of {v.row_split_lanes} lanes (large fp32-state calls)"
            configs.append(replace(cfg, v_gdn=v.at_block(bv, True), note=note))
    return configs


def sm75_gate_matrix() -> list[tuple[ArchLaunchConfig, DtypeCombo, LayoutVariant]]:
    """What the sm_75 gate compiles: every configuration a launch can run with x every supported dtype
    combination it runs with (default layout), plus the other layouts once for the SM75 config in fp16. A split
    configuration runs with fp32 states only (the entry never splits rows of a 16-bit state, which would spill
    under the split's register cap)."""
    matrix = [
        (cfg, combo, DEFAULT_LAYOUT)
        for cfg in runtime_launch_configs()
        for combo in SUPPORTED_DTYPE_COMBOS
        if not cfg.v_gdn.splits_rows(cfg.v_gdn.BV, True) or splits_rows(cfg, combo)
    ]
    sm75 = next(c for c in ALL_LAUNCH_CONFIGS if c.arch == "sm75")
    matrix += [(sm75, SUPPORTED_DTYPE_COMBOS[0], layout) for layout in EXTRA_LAYOUTS]
    return matrix


def gate_problems(infos: Iterable[CompiledKernelInfo]) -> list[str]:
    """Human-readable violations of the sm_75 rules (empty when the gate passes)."""
    problems = []
    for info in infos:
        where = f"{info.kernel} [{info.config}; {info.dtypes}; {info.layout}]"
        problems += sm75_rule_problems(where, info.shared_bytes, info.ptx_has_bf16, info.bf16_inputs, None)
        if info.butterfly_layout_problem:
            problems.append(
                f"{where}: the row butterfly's PTX does not match the layout: {info.butterfly_layout_problem}"
            )
        if info.spill_bytes:  # None: no ptxas to ask
            problems.append(f"{where}: {info.spill_bytes} B of register spills (the state slab is meant for registers)")
    return problems
