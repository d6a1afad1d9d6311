"""Builders the test tiers share (tiny model configs, a tokenizer); importable as ``helpers`` because pytest
puts ``tests/`` on ``sys.path`` for ``tests/conftest.py``."""
