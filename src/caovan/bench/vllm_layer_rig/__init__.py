"""Build vLLM's real GatedDeltaNet layer the way vLLM does, for every family caovan serves (vLLM 0.12 on).

What moved between releases (the constructor's arguments, how caovan's override goes in, how the caches are bound,
the null block, the metadata fields) is read from the installed family's record
(``caovan.adapters.registry.installed_family()``); ``tests/discovery/test_layer_rig_vllm.py`` builds it all on CPU
in every matrix row.  Everything the layer core touches comes from vLLM's own code, not from stand-ins:

* the model: a tiny ``config.json`` (Qwen3-Next or Qwen3.5 layout) parsed by ``ModelConfig``; the layer is built
  from ``model_config.hf_text_config`` with the ``gqa_interleaved_layout`` that ``models/qwen3_next.py`` (True)
  and ``models/qwen3_5.py`` (False) pass, inside ``set_current_vllm_config`` and the default dtype/device the
  model loader sets;
* speculative decoding: a real ``SpeculativeConfig(method="ngram")`` (the one speculative method that needs no
  draft model; the layer and the metadata builder only read ``num_speculative_tokens``);
* the caches: allocated exactly as ``GPUModelRunner._reshape_kv_cache_tensors`` does for a ``MambaSpec`` (one
  int8 buffer per layer, conv state then SSM state inside each page, page-strided views) and bound as
  ``layer.kv_cache = [conv_state, ssm_state]`` like ``bind_kv_cache`` (one such pair per virtual engine before
  vLLM 0.19);
* the metadata: ``GDNAttentionMetadataBuilder.build`` / ``build_for_cudagraph_capture`` on a
  ``CommonAttentionMetadata`` shaped like the one ``GPUModelRunner`` passes (padded requests have zero length
  and the family's null block-table row, ``num_decode_draft_tokens`` is -1 for requests without drafts).

Import cost: only torch at import time; vLLM is imported inside the functions that need it.
"""

from .batch import (
    Batch,
    Request,
    build_capture_metadata,
    build_metadata,
    make_batch,
    make_metadata_builder,
    padding_request,
    prefill_request,
    spec_request,
)
from .cache import MambaCache, allocate_and_bind_cache, allocate_cache, bind_cache
from .core import (
    CoreInputs,
    fla_autotune_first_config_only,
    live_spec_rows,
    new_core_output,
    non_spec_rows,
    random_core_inputs,
    reference_arguments,
    run_core,
    spec_blocks,
)
from .layer import (
    FAMILIES,
    MAX_MODEL_LEN,
    TinyGdnModel,
    build_gdn_layer,
    caovan_override_class,
    cpu_device_plumbing,
    ensure_single_process_distributed,
    make_vllm_config,
    null_block_id,
    randomize_parameters_,
    shutdown_distributed,
    write_model_dir,
)

__all__ = [
    "Batch",
    "CoreInputs",
    "FAMILIES",
    "MAX_MODEL_LEN",
    "MambaCache",
    "Request",
    "TinyGdnModel",
    "allocate_and_bind_cache",
    "allocate_cache",
    "bind_cache",
    "build_capture_metadata",
    "build_gdn_layer",
    "build_metadata",
    "caovan_override_class",
    "cpu_device_plumbing",
    "ensure_single_process_distributed",
    "fla_autotune_first_config_only",
    "live_spec_rows",
    "make_batch",
    "make_metadata_builder",
    "make_vllm_config",
    "new_core_output",
    "non_spec_rows",
    "null_block_id",
    "padding_request",
    "prefill_request",
    "random_core_inputs",
    "randomize_parameters_",
    "reference_arguments",
    "run_core",
    "shutdown_distributed",
    "spec_blocks",
    "spec_request",
    "write_model_dir",
]
