"""Builders for caovan's own test tiers (tiny model configs, real vLLM GDN layers with their caches).

Nothing here runs in a serving process; modules import vLLM lazily, so importing them needs neither vLLM's
start-up cost nor a GPU.
"""
