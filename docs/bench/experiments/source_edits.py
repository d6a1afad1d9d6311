"""The one text edit the variant generators of these experiments make to kernel source.

Each ``make_*.py`` (run from the repository root) writes a variant of ``src/caovan/kernels/gdn_spec_decode/
triton_kernels.py`` into ``.exp/variants2/`` by replacing exact pieces of it. ``sub`` refuses a piece that does not
occur exactly ``count`` times, so a generator fails loudly once main's kernel no longer has what it edits, instead
of writing an unchanged or half-edited variant. Generators import it with their parent folder on ``sys.path``.
"""


def sub(text: str, old: str, new: str, count: int = 1) -> str:
    assert text.count(old) == count, (text.count(old), old[:80])
    return text.replace(old, new)
