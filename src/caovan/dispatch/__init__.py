"""Routing vLLM's GDN speculative-decode core to caovan's kernels, and the proof that it happened."""
