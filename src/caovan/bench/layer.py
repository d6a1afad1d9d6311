"""``caovan bench layer``: a GDN layer's whole spec-decode core as vLLM calls it, vLLM's own vs caovan's.

``bench kernels`` times the kernels and the statements vLLM's spec branch runs (a lower bound of what vLLM
pays per layer). This times what a decode step really calls per GDN layer: ``layer._forward_core(mixed_qkv, b,
a, core_attn_out)`` of two real ``GatedDeltaNetAttention`` layers that vLLM builds from one model config — the
in-tree class and caovan's override, the same weights, caches laid out as the model runner lays them out —
on the metadata vLLM's own GDN metadata builder makes for a pure speculative-decode step (eager, as under
PIECEWISE CUDA graphs, where this core runs outside the graphs). Host-inclusive: metadata lookups, views,
allocations and launches of both paths are in. The blocks of the two layers alternate (``time_eager_us``).

Only the GDN head shapes matter to the core, so the model is the tiny one of ``caovan.bench.vllm_layer_rig``
with the per-GPU head counts of Qwen3.6-27B and Qwen3-Next-80B at TP=2. Correctness is not checked here
(``tests/layer_gpu`` checks that the two layers agree); a row records whether caovan's layer took the step.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from caovan.bench.kernels import BenchSettings, run_each, time_eager_us

JSON_SCHEMA = "caovan-bench-layer/1"

#: (family, key heads, value heads per GPU at TP=2, head dim): Qwen3.6-27B (Qwen3.5 layout) and Qwen3-Next-80B.
LAYER_HEADS = {
    "qwen3.6-27b-tp2": ("qwen3_5", 8, 24, 128),
    "qwen3-next-80b-tp2": ("qwen3_next", 8, 16, 128),
}
LAYER_GRID = {"head": tuple(LAYER_HEADS), "num_seqs": (1, 4, 8), "num_spec": (1, 3), "ssm_cache_dtype": ("float32",)}
LAYER_GRID_QUICK = {"head": ("qwen3.6-27b-tp2",), "num_seqs": (4,), "num_spec": (3,), "ssm_cache_dtype": ("float32",)}
ACT_DTYPE = "bfloat16"  # what the checkpoints ship (fp16 on SM75 changes no host path)


@dataclass(frozen=True)
class LayerCase:
    head: str
    num_seqs: int
    num_spec: int
    ssm_cache_dtype: str

    def __post_init__(self) -> None:
        if self.head not in LAYER_HEADS:
            raise ValueError(f"LayerCase.head: expected one of {sorted(LAYER_HEADS)}, got {self.head!r}")
        if not 1 <= self.num_spec <= 4 or self.num_seqs < 1:
            raise ValueError(f"LayerCase: num_seqs >= 1 and num_spec in 1..4, got {self.num_seqs}, {self.num_spec}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def id(self) -> str:
        return f"{self.head}/B{self.num_seqs}/mtp{self.num_spec}/ssm-{self.ssm_cache_dtype}"

    @property
    def num_blocks(self) -> int:
        return 1 + self.num_seqs * (self.num_spec + 1)  # the null block, then one block per state slot


def layer_cases(quick: bool = False) -> list[LayerCase]:
    grid = LAYER_GRID_QUICK if quick else LAYER_GRID
    return [
        LayerCase(head, b, mtp, ssm)
        for head in grid["head"]
        for mtp in grid["num_spec"]
        for ssm in grid["ssm_cache_dtype"]
        for b in grid["num_seqs"]
    ]


def tiny_model(case: LayerCase) -> Any:
    import torch

    from caovan.bench.vllm_layer_rig import TinyGdnModel

    family, h, hv, k = LAYER_HEADS[case.head]
    return TinyGdnModel(
        family, num_k_heads=h, num_v_heads=hv, head_dim=k, num_spec=case.num_spec,
        dtype=getattr(torch, ACT_DTYPE), ssm_cache_dtype=case.ssm_cache_dtype,
    )  # fmt: skip


def bench_layer_case(case: LayerCase, workdir: Path, settings: BenchSettings, device: Any = "cuda") -> dict[str, Any]:
    """Both layers of one case, built, bound and timed; a JSON-able row."""
    import torch
    from vllm.forward_context import set_forward_context

    from caovan.bench import vllm_layer_rig as rig
    from caovan.plugin import counters

    device = torch.device(device)
    model = tiny_model(case)
    config = rig.make_vllm_config(model, rig.write_model_dir(model, workdir / case.id.replace("/", "_")), caovan=True)
    rig.ensure_single_process_distributed(config)
    in_tree = rig.build_gdn_layer(config, model, "model.layers.0.linear_attn", device, caovan=False)
    ours = rig.build_gdn_layer(config, model, "model.layers.1.linear_attn", device, caovan=True)
    rig.randomize_parameters_(in_tree, seed=1)
    ours.load_state_dict(in_tree.state_dict())
    for layer, seed in ((in_tree, 2), (ours, 2)):
        rig.allocate_and_bind_cache(layer, config, case.num_blocks, device).fill_random_(seed)
    builder = rig.make_metadata_builder(in_tree, [in_tree.prefix, ours.prefix], config, device, full_cuda_graph=False)
    t = model.tokens_per_spec_request
    requests = [
        rig.spec_request(model, range(1 + i * t, 1 + (i + 1) * t), num_accepted=(i % t) + 1)
        for i in range(case.num_seqs)
    ]
    batch = rig.make_batch(requests, device)
    metadata = rig.build_metadata(builder, batch)
    inputs = rig.random_core_inputs(model, batch.num_tokens, seed=3, device=device)

    def core(layer: Any) -> Any:
        mine = inputs.clone()  # vLLM's conv writes its output over mixed_qkv: each layer its own copy
        out = rig.new_core_output(model, batch.num_tokens, device)
        # Views made here, not in the timed call: in a model they come out of the projections before the core.
        mixed_qkv, b, a = mine.mixed_qkv, mine.b, mine.a
        return lambda: layer._forward_core(mixed_qkv, b, a, out)

    calls = {"vllm": core(in_tree), "ours": core(ours)}
    with torch.no_grad(), set_forward_context({in_tree.prefix: metadata, ours.prefix: metadata}, config):
        counters.reset()
        calls["ours"]()
        dispatched = counters.snapshot()
        eager = time_eager_us([calls["vllm"], calls["ours"]], settings)
    took_step = dispatched["dispatched"] == {"spec": 1} and not dispatched["fallbacks"]
    return {
        "id": case.id,
        "case": {**case.as_dict(), "num_tokens": batch.num_tokens, "act_dtype": ACT_DTYPE},
        "vllm": {"eager_us": eager[0]},
        "ours": {"eager_us": eager[1]},
        "speedup_eager": eager[0] / eager[1] if eager[1] > 0 else None,
        "caovan_took_the_step": took_step,
        "counters": {"dispatched": dispatched["dispatched"], "fallbacks": dispatched["fallbacks"]},
        "error": None if took_step else f"caovan's layer did not take the spec step: {dispatched}",
    }


def run_layer_cases(
    cases: Sequence[LayerCase], settings: BenchSettings, progress: Any = print, device: Any = "cuda"
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="caovan-bench-layer-") as tmp:
        return run_each(cases, lambda case: bench_layer_case(case, Path(tmp), settings, device), progress)


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    speedups = [r["speedup_eager"] for r in rows if not r.get("error") and r.get("speedup_eager")]
    return {
        "cases": len(rows),
        "errors": sum(bool(r.get("error")) for r in rows),
        "geomean_speedup_eager": statistics.geometric_mean(speedups) if speedups else None,
        "min_speedup_eager": min(speedups) if speedups else None,
    }


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    from tabulate import tabulate

    table = []
    for r in rows:
        if r.get("error"):
            table.append([r["id"], "ERROR: " + r["error"], "", ""])
        else:
            table.append(
                [r["id"], f"{r['vllm']['eager_us']:.1f}", f"{r['ours']['eager_us']:.1f}", f"{r['speedup_eager']:.2f}"]
            )
    return tabulate(table, headers=("case", "vLLM us", "caovan us", "x"), tablefmt="github", disable_numparse=True)
