import os

# The discovery tier imports the real vLLM on machines without a GPU; vLLM then picks its CPU/unspecified
# platform instead of failing on a missing driver.  GPU tiers keep whatever the runner exposes.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")
