"""Fuzzed spec-decode batches per GDN family: caovan's kernels and the row's own vLLM against the float64 oracle.

``rules`` reads a family record into the layout rules the generator obeys; ``cases`` draws one batch from a seed and
an index; ``inputs`` builds its tensors; ``run`` runs the three sides on one case and sums many; ``shrink`` reduces a
failing case; ``regressions`` keeps shrunk cases as fixed ones. ``tests/numerics/spec_fuzz_cases.py`` is the script
the numerics tier and ``nox -s "fuzz(<row>)"`` run. Importing any of these imports torch at most, never triton,
caovan's kernels or vLLM.
"""
