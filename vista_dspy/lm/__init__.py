"""The LM side, apart from the method: ``models`` (the paper's models by short name, ``ModelConfig`` that builds
any DSPy/litellm LM, the program a model judges with by default), ``clients/`` (how a request reaches its endpoint,
slots, adapters, answer caches), ``offline`` (litellm imported without fetching its price table), the embedded judge
(``weights``: its GGUF; ``server``: its llama.cpp server), ``warm_start`` (the server's slots kept between commands)
and ``fake/`` (a rule-based fake LM, in-process or behind an OpenAI-compatible HTTP server, for tests and
benchmarks).
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "models": ("MODELS", "ModelConfig", "ModelSpec", "program_for_model", "program_name_for"),
    "server": ("LocalServer", "ServerSettings"),
    "weights": ("ModelNotFound", "resolve_gguf"),
})
