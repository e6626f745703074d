"""The server's own account of each LM call: llama.cpp answers every completion with ``timings`` (prompt tokens it
read and the milliseconds it spent reading them, tokens it wrote and the milliseconds it spent writing them, and
the prompt tokens its prefix cache served). ``TimedLM`` books them in DSPy's usage entry of the call, so that they
reach ``UsageCounts`` per stage beside the token counts; an endpoint that sends no timings books nothing, and a
cache hit (no model time) books nothing either, as DSPy books no usage for it.
"""

from __future__ import annotations

from typing import Any

import dspy

# llama.cpp's ``timings`` field -> the usage entry's key.
SERVER_FIELDS: dict[str, str] = {
    "prompt_n": "server_prompt_tokens",      # prompt tokens the model read (not served by the prefix cache)
    "cache_n": "server_cached_tokens",       # prompt tokens the prefix cache served
    "prompt_ms": "server_prompt_ms",
    "predicted_n": "server_written_tokens",
    "predicted_ms": "server_generation_ms",
}


def server_usage(response: Any) -> dict[str, float]:
    """The usage keys of a response's server timings ({} when it has none)."""
    timings = getattr(response, "timings", None)
    if timings is None and isinstance(response, dict):
        timings = response.get("timings")
    if not isinstance(timings, dict):
        return {}
    return {key: float(timings[name]) for name, key in SERVER_FIELDS.items()
            if isinstance(timings.get(name), (int, float))}


def _timings_of(result: Any) -> dict[str, float]:
    """The server timings of a DSPy call result: on litellm's response (``raw``) or in an lm15 response's
    ``provider_data`` (DSPy's native engine)."""
    found = server_usage(getattr(result, "raw", None))
    for response in () if found else getattr(result, "responses", ()) or ():
        found = server_usage(getattr(response, "provider_data", None) or {})
        if found:
            break
    return found


class TimedLM(dspy.LM):
    """``dspy.LM`` whose calls also book the server's timings in DSPy's usage entry of the call."""


def _install() -> None:
    """DSPy 3.4 books a call's usage in ``execution.finalize`` from the call result's ``usage`` dict, and every LM
    call (sync and async) reaches it; the result still holds the server's response there. Wrapping it (once) is the
    one place where a call's usage and the server's timings meet; only ``TimedLM`` calls are touched."""
    from dspy.clients import execution

    if getattr(execution.finalize, "books_server_timings", False):
        return
    original = execution.finalize

    def finalize(lm, call, result):
        if isinstance(lm, TimedLM):
            if getattr(result, "cache_hit", False):  # DSPy books nothing for it: say that an answer came from the cache
                if dspy.settings.usage_tracker:
                    dspy.settings.usage_tracker.add_usage(lm.model, {"cache_hit": 1})
            elif isinstance(result.usage, dict):
                result.usage.update(_timings_of(result))
        return original(lm, call, result)

    finalize.books_server_timings = True
    execution.finalize = finalize


_install()
