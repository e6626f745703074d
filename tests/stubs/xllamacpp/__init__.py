"""A stand-in for llama.cpp's Python server (``xllamacpp``) when a test runs `vista serve` without the model: the
same lifecycle -- ``Server(params)`` serves on ``params.port`` until the process ends -- answering with the fake
OpenAI-compatible server (``STUB_LLAMA_LATENCY`` seconds a request). Put this folder first on PYTHONPATH."""

import os


class _Params:
    """Any setting, nested (``params.model.path = ...``), as xllamacpp's parameter objects take them."""

    def __getattr__(self, name):
        value = _Params()
        object.__setattr__(self, name, value)
        return value


CommonParams = _Params


class Server:
    def __init__(self, params):
        from vista_dspy.lm.fake import FakeOpenAIServer

        self.fake = FakeOpenAIServer(port=params.port, latency=float(os.environ.get("STUB_LLAMA_LATENCY", "0")))
        self.fake.__enter__()
