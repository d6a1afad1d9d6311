"""Benchmarks and side-by-side checks of caovan's GDN spec-decode kernels against vLLM's own path.

- ``cases``: benchmark/test shapes declared as data, and a builder of random inputs laid out like
  vLLM's mamba caches (page-strided conv and SSM state views, one block per (sequence, token)).
- ``vllm_spec_path``: ``VllmSpecCore``, vLLM's speculative-decode core for a pure-spec batch,
  calling the kernels the installed vLLM's GDN module really calls.
- ``roofline``: bytes a spec-decode step must move through DRAM (no torch needed).
- ``accuracy``: max-abs-error of an implementation against the float64 reference, and the rules.
- ``kernels``: ``caovan bench kernels`` (timing, roofline, errors, table and JSON).
- ``e2e``: ``caovan bench e2e`` (a model served caovan off then on through the user's commands, decode tokens/s);
  ``e2e_report``: the table and plot of ``docs/performance.md`` from its records.
"""
