"""Triton kernels of caovan, one folder per op (kernel beside its plain-PyTorch reference)."""
