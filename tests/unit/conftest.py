import logging

import pytest


@pytest.fixture
def caovan_records():
    """The records caovan's logger emits during the test.

    vLLM configures logging when ``vllm.logger`` is first imported, and ``dictConfig`` then strips the handlers of
    every existing child of the ``vllm`` logger, caovan's among them.  A test that triggers that first import
    (register() probing the real vLLM) would lose a handler added before it, so vLLM's set-up runs first.
    """
    try:
        import vllm.logger  # noqa: F401
    except ImportError:  # unit tests also run without vLLM: then nothing strips the handler
        pass
    from caovan.log import logger

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def fake_openai():
    """A fake vLLM OpenAI-compatible server on 127.0.0.1 (see fake_openai_server.py), stopped after the test."""
    from fake_openai_server import FakeOpenAI

    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def no_api_key_env(monkeypatch):
    """No API key reaches a serving-client command from the environment the tests run in."""
    from caovan.serving.client import API_KEY_ENV

    for name in API_KEY_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module of tiny-tensor tests: on a loaded 2-core machine its second thread only
    waits for a core (about 50 times slower on the spec fuzzer's float64 oracle)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
