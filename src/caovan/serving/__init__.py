"""The user-facing serving tools: the ``vllm serve`` command line caovan builds, and the HTTP client that
``caovan warmup`` and ``caovan benchmark`` drive a running server with.  Nothing here runs inside vLLM."""
