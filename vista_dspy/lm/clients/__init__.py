"""LM plumbing, apart from the method: how a request reaches an endpoint (DSPy's native engine for self-hosted
servers), how many are in flight (request slots), how prompts are formatted (memoizing adapters) and where answers
are cached."""

from ...lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "adapters": ("ADAPTERS", "ChatAdapter", "JSONAdapter", "build_adapter"),
    "cache": ("cache_dir_for", "cache_root", "use_cache_for"),
    "engines": ("SELF_HOSTED_PREFIX", "aclose_client", "endpoint_engines"),
    "slots": ("IN_FLIGHT", "PRIORITY", "RequestSlots", "request_slot"),
})
