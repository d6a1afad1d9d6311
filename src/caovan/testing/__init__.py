"""Test support that ships with the package (builders for tests that exercise the real vLLM).

Nothing here runs in a serving process; modules import vLLM lazily so importing them needs neither vLLM's
start-up cost nor a GPU.
"""
