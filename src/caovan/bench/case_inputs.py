"""``build_inputs``: random inputs of a case, laid out the way vLLM 0.21.0 lays out its mamba caches.

``GPUModelRunner._reshape_kv_cache_tensors`` makes one raw byte buffer of pages, each page holding the conv state
then the SSM state of one cache block, viewed with ``as_strided`` so dim 0 strides over whole pages (the views are
not contiguous). ``SpecDecodeInputs`` keeps the tensors as views into backing buffers, so copies keep those strides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .batch_plan import BatchPlan, plan_batch
from .case_definition import DTYPE_BYTES, NULL_BLOCK_ID, SSM_LAYOUTS, SpecDecodeCase

#: Cache pages are padded like vLLM pads mamba pages to the attention page size (page_size_padded):
#: one page size per head config, big enough for MTP <= PAGE_MAX_MTP with fp32 states, plus at
#: least PAGE_PADDING_BYTES, rounded up to PAGE_ALIGN. One size for every MTP and dtype is also what
#: keeps Triton from compiling a kernel per case (vLLM's kernels take the page stride as constexpr).
#: The unused tail of every page is filled with PAGE_PADDING_FILL: tests prove nobody writes it.
PAGE_MAX_MTP = 4
PAGE_PADDING_BYTES = 256
PAGE_ALIGN = 4096
PAGE_PADDING_FILL = 0xA5


@dataclass(frozen=True)
class _ViewSpec:
    backing: str  # key into SpecDecodeInputs.backing
    dtype: Any  # torch dtype the backing is reinterpreted as (raw byte buffers hold mixed dtypes)
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # elements of ``dtype``
    transpose_last: bool = False  # logical view = stored view with its last two dims swapped


def _make_view(backing: dict[str, Any], spec: _ViewSpec):
    import torch

    base = backing[spec.backing]
    if base.dtype != spec.dtype:
        base = base.view(spec.dtype)
    v = torch.as_strided(base, spec.size, spec.stride, spec.offset)
    return v.transpose(-1, -2) if spec.transpose_last else v


#: Positional tensor arguments of ``gdn_spec_decode``, in order.
TENSOR_ARGS = (
    "mixed_qkv",
    "a",
    "b",
    "A_log",
    "dt_bias",
    "conv_weight",
    "conv_bias",
    "conv_state",
    "ssm_state",
    "query_start_loc",
    "state_indices",
    "num_accepted_tokens",
    "out",
)


@dataclass
class SpecDecodeInputs:
    """Tensors of one case, as views into backing buffers so clones keep vLLM's exact strides."""

    case: SpecDecodeCase
    plan: BatchPlan
    backing: dict[str, Any]
    views: dict[str, _ViewSpec]
    token_index: Any = None  # int64 tensor or None

    def __getattr__(self, name: str):
        views = self.__dict__.get("views", {})
        if name in views:
            return _make_view(self.backing, views[name])
        raise AttributeError(name)

    @property
    def conv_bias(self):
        return _make_view(self.backing, self.views["conv_bias"]) if "conv_bias" in self.views else None

    # ------------------------------------------------------------------ copies
    def clone(self) -> SpecDecodeInputs:
        """Deep copy with identical strides and offsets (clone the backing buffers, re-view)."""
        return replace(self, backing={k: v.clone() for k, v in self.backing.items()})

    def nbytes(self) -> int:
        """Memory of the backing buffers (what one clone allocates)."""
        return sum(v.numel() * v.element_size() for v in self.backing.values())

    def copy_from(self, other: SpecDecodeInputs) -> None:
        """Overwrite this copy's buffers in place with ``other``'s values (CUDA-graph inputs)."""
        for k, v in self.backing.items():
            v.copy_(other.backing[k])

    def to_float64(self) -> SpecDecodeInputs:
        """Same logical values, every float tensor upcast to float64 (for the float64 reference).

        Upcasting fp16/fp32 is exact, so the reference sees the very same inputs; its outputs and
        states are then stored in float64 without rounding.
        """
        import torch

        backing: dict[str, Any] = {}
        views: dict[str, _ViewSpec] = {}
        for name, spec in self.views.items():
            t = _make_view(self.backing, spec)
            if t.is_floating_point():
                t = t.to(torch.float64)
            t = t.clone()  # plain dense tensor with the same logical shape
            backing[name] = t
            views[name] = _ViewSpec(name, t.dtype, tuple(t.shape), tuple(t.stride()), 0)
        return replace(self, backing=backing, views=views)

    def with_ssm_layout(self, layout: str) -> SpecDecodeInputs:
        """A copy whose SSM state is stored in ``layout`` (same page-strided cache otherwise).

        vLLM >= 0.16 only handles "vk"; tests run vLLM on the "vk" copy of a "kv" case so its
        numerical error can still be measured (the maths does not depend on where numbers live).
        """
        if layout not in SSM_LAYOUTS:
            raise ValueError(f"ssm layout must be one of {SSM_LAYOUTS}, got {layout!r}")
        new = self.clone()
        if layout == self.case.ssm_layout:
            return new
        spec = self.views["ssm_state"]
        blocks, hv, d1, d2 = spec.size
        s0 = spec.stride[0]
        new_spec = replace(spec, size=(blocks, hv, d2, d1), stride=(s0, d1 * d2, d1, 1))
        _make_view(new.backing, new_spec).copy_(self.ssm_state.transpose(-1, -2))
        new.views = {**new.views, "ssm_state": new_spec}
        new.case = replace(self.case, ssm_layout=layout)
        return new

    def ssm_state_vk(self):
        """The SSM state as a logical (blocks, HV, V, K) view whatever the storage layout."""
        s = self.ssm_state
        return s if self.case.ssm_layout == "vk" else s.transpose(-1, -2)

    # ------------------------------------------------------------------ calling conventions
    def kernel_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments of ``gdn_spec_decode`` (the shared contract)."""
        h = self.case.head_config
        args = tuple(getattr(self, name) for name in TENSOR_ARGS)
        kwargs = dict(
            num_k_heads=h.num_k_heads,
            head_k_dim=h.head_k_dim,
            head_v_dim=h.head_v_dim,
            ssm_layout=self.case.ssm_layout,
            null_slot_max=NULL_BLOCK_ID,
            token_index=self.token_index,
        )
        return args, kwargs

    def page_padding_intact(self) -> bool:
        """True when no byte of the cache pages past the conv and SSM states changed."""
        raw = self.backing.get("cache")
        if raw is None:
            return True
        page_bytes = raw.numel() // self.plan.num_blocks
        used = state_bytes(self.case)
        pad = raw.view(self.plan.num_blocks, page_bytes)[:, sum(used) :]
        return bool((pad == PAGE_PADDING_FILL).all())


def state_bytes(case: SpecDecodeCase) -> tuple[int, int]:
    """Bytes of one block's conv state and SSM state (the used head of a cache page)."""
    h = case.head_config
    state_len = h.conv_width - 1 + case.num_spec_tokens
    conv = state_len * h.conv_dim * DTYPE_BYTES[case.conv_state_dtype]
    ssm = h.num_v_heads * h.head_v_dim * h.head_k_dim * DTYPE_BYTES[case.ssm_dtype]
    return conv, ssm


def page_size_bytes(case: SpecDecodeCase) -> int:
    """Cache page size of the case's head config (same for every MTP <= PAGE_MAX_MTP and dtype)."""
    mtp = max(PAGE_MAX_MTP, case.num_spec_tokens)
    widest = replace(case, num_spec_tokens=mtp, ssm_dtype="float32", conv_dtype="float32")
    need = sum(state_bytes(widest)) + PAGE_PADDING_BYTES
    return -(-need // PAGE_ALIGN) * PAGE_ALIGN


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def build_inputs(case: SpecDecodeCase, device: Any = "cpu", *, value_seed: int | None = None) -> SpecDecodeInputs:
    """Random inputs for ``case``, made on ``device`` (deterministic per seed and device type).

    The batch plan (lengths, slots, accepted counts: every shape) comes from ``case.seed``; tensor
    values from ``value_seed`` (default ``case.seed``), so a CUDA-graph test can refill captured
    buffers with new values of the same shapes. Values are drawn on the device itself (a model-size
    cache is tens of millions of numbers: too slow to draw on the CPU for every test case), so a GPU
    and the CPU draw different, equally valid, numbers.

    Value ranges follow the real layer: A_log = log(U[1, 16]), dt_bias = softplus^-1(U[1e-3, 0.1])
    (Mamba-2 initialisation), unit-scale activations and conv history, conv weights ~ N(0, 1/width),
    SSM state ~ N(0, 0.1^2).
    """
    import torch

    plan = plan_batch(case)
    h = case.head_config
    t_max = case.max_query_len
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(case.seed if value_seed is None else value_seed)
    act = _torch_dtype(case.act_dtype)
    conv_dt = _torch_dtype(case.conv_state_dtype)
    ssm_dt = _torch_dtype(case.ssm_dtype)

    def randn(*shape, scale=1.0, dtype=act):
        x = torch.randn(*shape, generator=gen, dtype=torch.float32, device=device)
        return (x * scale).to(dtype)

    backing: dict[str, Any] = {}
    views: dict[str, _ViewSpec] = {}

    def dense(name: str, t):
        backing[name] = t
        views[name] = _ViewSpec(name, t.dtype, tuple(t.shape), tuple(t.stride()), 0)

    rows = plan.num_token_rows
    # --- activations (rows past the batch and non-spec rows are random too: nobody may read them)
    if case.strided_inputs:
        # vLLM <= 0.20 sliced mixed_qkv out of the wider in_proj output, a/b out of one ba buffer.
        extra = 64
        proj = randn(rows, h.conv_dim + extra)
        backing["proj"] = proj
        views["mixed_qkv"] = _ViewSpec("proj", act, (rows, h.conv_dim), (h.conv_dim + extra, 1), 0)
        ba = randn(rows, 2 * h.num_v_heads)
        backing["ba"] = ba
        hv = h.num_v_heads
        views["b"] = _ViewSpec("ba", act, (rows, hv), (2 * hv, 1), 0)
        views["a"] = _ViewSpec("ba", act, (rows, hv), (2 * hv, 1), hv)
    else:
        dense("mixed_qkv", randn(rows, h.conv_dim))
        dense("b", randn(rows, h.num_v_heads))
        dense("a", randn(rows, h.num_v_heads))

    # --- layer parameters
    f64 = dict(dtype=torch.float64, device=device)
    a_log = torch.empty(h.num_v_heads, **f64).uniform_(1.0, 16.0, generator=gen).log()
    dense("A_log", a_log.to(torch.float32))
    dt = torch.empty(h.num_v_heads, **f64).uniform_(1e-3, 0.1, generator=gen)
    dense("dt_bias", (dt + torch.log(-torch.expm1(-dt))).to(act))  # softplus^-1(dt)
    dense("conv_weight", randn(h.conv_dim, h.conv_width, scale=h.conv_width**-0.5))
    if case.conv_bias:
        dense("conv_bias", randn(h.conv_dim, scale=0.1))

    # --- caches: raw pages [conv state | SSM state | padding], as vLLM's _reshape_kv_cache_tensors
    state_len = h.conv_width - 1 + case.num_spec_tokens
    conv_bytes, _ = state_bytes(case)
    page_bytes = page_size_bytes(case)
    for itemsize in (DTYPE_BYTES[case.conv_state_dtype], DTYPE_BYTES[case.ssm_dtype]):
        if page_bytes % itemsize or conv_bytes % itemsize:
            raise ValueError(f"case {case.id}: cache page of {page_bytes} B not aligned to {itemsize} B")
    nb = plan.num_blocks
    cache = torch.full((nb * page_bytes,), PAGE_PADDING_FILL, dtype=torch.uint8, device=device)
    backing["cache"] = cache
    conv_page = page_bytes // DTYPE_BYTES[case.conv_state_dtype]
    if case.conv_layout == "SD":
        # stored (blocks, state_len, dim); the core passes .transpose(-1, -2)
        conv_spec = _ViewSpec(
            "cache",
            conv_dt,
            (nb, state_len, h.conv_dim),
            (conv_page, h.conv_dim, 1),
            0,
            transpose_last=True,
        )
    else:  # DS: stored (blocks, dim, state_len)
        conv_spec = _ViewSpec("cache", conv_dt, (nb, h.conv_dim, state_len), (conv_page, state_len, 1), 0)
    views["conv_state"] = conv_spec
    ssm_page = page_bytes // DTYPE_BYTES[case.ssm_dtype]
    ssm_off = conv_bytes // DTYPE_BYTES[case.ssm_dtype]
    d1, d2 = (h.head_v_dim, h.head_k_dim) if case.ssm_layout == "vk" else (h.head_k_dim, h.head_v_dim)
    views["ssm_state"] = _ViewSpec("cache", ssm_dt, (nb, h.num_v_heads, d1, d2), (ssm_page, d1 * d2, d2, 1), ssm_off)
    _make_view(backing, conv_spec).copy_(randn(nb, h.conv_dim, state_len, dtype=conv_dt))
    _make_view(backing, views["ssm_state"]).copy_(randn(nb, h.num_v_heads, d1, d2, scale=0.1, dtype=ssm_dt))

    # --- metadata (int32 like vLLM's GDN metadata builder)
    i32 = dict(dtype=torch.int32, device=device)
    dense("query_start_loc", torch.tensor(plan.query_start_loc, **i32))
    dense("state_indices", torch.tensor(plan.state_index_rows(), **i32).reshape(-1, t_max))
    dense("num_accepted_tokens", torch.tensor(plan.accepted_rows(), **i32))
    # NaN everywhere: a row that should be written and is not shows up in every comparison.
    out_shape = (rows, h.num_v_heads, h.head_v_dim)
    dense("out", torch.full(out_shape, float("nan"), dtype=act, device=device))

    token_index = None
    if plan.token_index is not None:
        token_index = torch.tensor(plan.token_index, dtype=torch.int64, device=device)
    return SpecDecodeInputs(case=case, plan=plan, backing=backing, views=views, token_index=token_index)
