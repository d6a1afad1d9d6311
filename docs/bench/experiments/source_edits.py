"""The one text edit the variant generators of these experiments make to kernel source.

Each ``make_*.py`` (run from the repository root) writes a variant of ``src/caovan/kernels/gdn_spec_decode/
triton_kernels.py`` into ``.exp/variants2/`` by replacing exact pieces of it. ``sub`` refuses a piece that does not
occur exactly ``count`` times, so a generator fails loudly once main's kernel no longer has what it edits, instead
of writing an unchanged or half-edited variant. Generators import it with their parent folder on ``sys.path``.
"""


def sub(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) == count, (text.count(old), old[:80])
    return text.replace(old, new)


V_GDN_KERNEL = "def _caovan_sm75_fused_v_gdn_spec_decode_kernel("

#: Appended to a variant that is a bound with its V/GDN kernel alone: the timing harnesses
#: (``last-token-write-through/ab.py``) launch no Q/K kernel for it and do not take the direct launch path.
NO_QK_KERNEL_FLAGS = "\n\nNO_QK_KERNEL = True\nNO_DIRECT_LAUNCH = True\n"


#: The Q/K kernel's metadata loads as main has them, and as they were at the commits the older generators start
#: from (58db78d, 168d9a5): each early exit right after the load it needs, so the next load waits for its test.
QK_METADATA_LOADS = """    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    seq_len = eos - bos
    if seq_len <= 0:
        return  # CUDA-graph padding row
    conv_block = tl.load(state_indices_ptr + i_n.to(tl.int64) * stride_si_seq).to(tl.int64)
    if conv_block <= NULL_SLOT_MAX:
        return  # no conv slot: the V kernel writes zeros for this sequence
    window_offset = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64) - 1
"""

#: What the generators that move those loads put first instead: all four issued together (the exits follow,
#: each generator's own).
QK_METADATA_LOADS_TOGETHER = """    bos = tl.load(query_start_loc_ptr + i_n).to(tl.int64)
    eos = tl.load(query_start_loc_ptr + i_n + 1).to(tl.int64)
    conv_block = tl.load(state_indices_ptr + i_n.to(tl.int64) * stride_si_seq).to(tl.int64)
    window_offset = tl.load(num_accepted_tokens_ptr + i_n).to(tl.int64) - 1
    seq_len = eos - bos
"""


def sub_in_v_kernel(text: str, old: str, new: str) -> str:
    """``sub`` restricted to the V/GDN kernel: the Q/K kernel and the helpers above it stay as they are."""
    i = text.index(V_GDN_KERNEL)
    return text[:i] + sub(text[i:], old, new)


def write_variants(variants: dict[str, str]) -> None:
    """Writes each variant's source to ``.exp/variants2/k_NAME.py`` (what the timing harnesses load) and names it."""
    import os

    os.makedirs(".exp/variants2", exist_ok=True)
    for name, text in variants.items():
        with open(f".exp/variants2/k_{name}.py", "w") as f:
            f.write(text)
        print(f".exp/variants2/k_{name}.py")
