"""caovan logs through vLLM's logger tree so its lines carry vLLM's format and obey VLLM_LOGGING_LEVEL."""

from __future__ import annotations

import logging

# A child of vLLM's "vllm" logger: it inherits vLLM's handler and format once vLLM configured logging.
logger = logging.getLogger("vllm.caovan_sm75_turbo3")
