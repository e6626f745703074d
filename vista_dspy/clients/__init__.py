"""LM plumbing, apart from the method: how a request reaches an endpoint (DSPy's native engine for self-hosted
servers), how many are in flight (request slots), how prompts are formatted (memoizing adapters) and where answers
are cached."""

from .adapters import ADAPTERS, ChatAdapter, JSONAdapter, build_adapter
from .cache import cache_dir_for, cache_root, use_cache_for
from .engines import SELF_HOSTED_PREFIX, aclose_client, endpoint_engines
from .slots import IN_FLIGHT, PRIORITY, RequestSlots, request_slot

__all__ = [
    "ADAPTERS", "IN_FLIGHT", "PRIORITY", "SELF_HOSTED_PREFIX", "ChatAdapter", "JSONAdapter", "RequestSlots",
    "aclose_client", "build_adapter", "cache_dir_for", "cache_root", "endpoint_engines", "request_slot",
    "use_cache_for",
]
