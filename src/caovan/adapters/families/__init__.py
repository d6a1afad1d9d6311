"""Every GDN family caovan serves, one record each, newest first (the order families are probed in when no
version hint matches)."""

from .gdn_linear_attn_v019 import FAMILY as GDN_LINEAR_ATTN_V019
from .gdn_linear_attn_v020 import FAMILY as GDN_LINEAR_ATTN_V020
from .qwen3_next_gdn_v010 import V010 as QWEN3_NEXT_GDN_V010
from .qwen3_next_gdn_v010 import V011 as QWEN3_NEXT_GDN_V011
from .qwen3_next_gdn_v012 import FAMILY as QWEN3_NEXT_GDN_V012
from .qwen3_next_gdn_v016 import FAMILY as QWEN3_NEXT_GDN_V016
from .qwen3_next_gdn_v018 import FAMILY as QWEN3_NEXT_GDN_V018
from .qwen_gdn_v022 import FAMILY as QWEN_GDN_V022
from .qwen_gdn_v023 import FAMILY as QWEN_GDN_V023
from .qwen_gdn_v027 import FAMILY as QWEN_GDN_V027
from .qwen_gdn_v029 import FAMILY as QWEN_GDN_V029
from .qwen_gdn_v033 import FAMILY as QWEN_GDN_V033

FAMILIES = (
    QWEN_GDN_V033,
    QWEN_GDN_V029,
    QWEN_GDN_V027,
    QWEN_GDN_V023,
    QWEN_GDN_V022,
    GDN_LINEAR_ATTN_V020,
    GDN_LINEAR_ATTN_V019,
    QWEN3_NEXT_GDN_V018,
    QWEN3_NEXT_GDN_V016,
    QWEN3_NEXT_GDN_V012,
    QWEN3_NEXT_GDN_V011,
    QWEN3_NEXT_GDN_V010,
)

__all__ = [
    "FAMILIES",
    "GDN_LINEAR_ATTN_V019",
    "GDN_LINEAR_ATTN_V020",
    "QWEN3_NEXT_GDN_V010",
    "QWEN3_NEXT_GDN_V011",
    "QWEN3_NEXT_GDN_V012",
    "QWEN3_NEXT_GDN_V016",
    "QWEN3_NEXT_GDN_V018",
    "QWEN_GDN_V022",
    "QWEN_GDN_V023",
    "QWEN_GDN_V027",
    "QWEN_GDN_V029",
    "QWEN_GDN_V033",
]
