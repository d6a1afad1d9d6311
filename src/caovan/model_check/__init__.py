"""``caovan check-model``'s logic: could caovan's GDN spec-decode kernels serve this model folder?

No vLLM or torch import anywhere in this package: the check runs in a second on a machine without a GPU.
"""

from .architectures import GDN_ARCHITECTURES, GdnArchitecture
from .checks import DEFAULT_NUM_SPECULATIVE_TOKENS, check_model_dir, mtp_speculative_config
from .config import CONFIG_FILE_NAME, ModelCheckError, find_model_folder, is_local_path, load_config, model_folder
from .report import (
    CANDIDATE_CAVEAT,
    JSON_SCHEMA_ID,
    STATUS_FAIL,
    STATUS_PASS,
    STATUS_WARN,
    VERDICT_CANDIDATE,
    VERDICT_NOT_CANDIDATE,
    Check,
    ModelReport,
    format_report,
)
from .safetensors_headers import SAFETENSORS_INDEX_FILE_NAME, inspect_mtp_weights

__all__ = [
    "CANDIDATE_CAVEAT",
    "CONFIG_FILE_NAME",
    "DEFAULT_NUM_SPECULATIVE_TOKENS",
    "GDN_ARCHITECTURES",
    "JSON_SCHEMA_ID",
    "SAFETENSORS_INDEX_FILE_NAME",
    "STATUS_FAIL",
    "STATUS_PASS",
    "STATUS_WARN",
    "VERDICT_CANDIDATE",
    "VERDICT_NOT_CANDIDATE",
    "Check",
    "GdnArchitecture",
    "ModelCheckError",
    "ModelReport",
    "check_model_dir",
    "find_model_folder",
    "format_report",
    "inspect_mtp_weights",
    "is_local_path",
    "load_config",
    "model_folder",
    "mtp_speculative_config",
]
