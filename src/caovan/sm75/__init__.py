"""SM75 readiness of a vLLM install without a 2080 Ti: the ``sm75`` matrix tier, ``doctor``'s and ``serve``'s checks.

Re-exports only; see each module's docstring.
"""

from .findings import FINDINGS_DIR_ENV, PARTS, read_parts, write_part

__all__ = ["FINDINGS_DIR_ENV", "PARTS", "read_parts", "write_part"]
