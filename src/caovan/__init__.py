"""caovan: Turbo3-compatible vLLM plugin for GatedDeltaNet + MTP speculative decoding on SM75."""

__version__ = "0.1.0"

#: The name vLLM's plugin loader knows this plugin by (entry point name, ``VLLM_PLUGINS`` item).
PLUGIN_NAME = "caovan_sm75_turbo3"
