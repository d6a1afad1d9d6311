"""Helpers for caovan's own test tiers (importable without a GPU and without vLLM)."""
