"""What runs inside vLLM's processes: the general-plugin entry point and what it sets up.

``caovan.plugin:register`` is the ``vllm.general_plugins`` entry point, so it must stay importable from here.
"""

from .startup import register

__all__ = ["register"]
