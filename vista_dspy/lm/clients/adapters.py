"""DSPy's JSON and chat adapters with the repeated parts of a prompt (system message, demos) formatted once."""

from __future__ import annotations

import copy
import threading
from typing import Any

import dspy


class _PromptPartsMemo:
    """Formats the parts of a prompt that repeat on every call of a predictor -- the system message and the
    few-shot demos -- once per (signature, demos) content, instead of once per call.

    DSPy rebuilds them for every call (pydantic schemas, JSON serialisation of every demo field): about a fifth of
    the client CPU of a call (5.1 -> 4.2 ms measured), which bounds throughput at high concurrency. The memo is keyed
    on content, not identity (batched judging rebuilds equal signatures and demo lists per turn), and its output is
    the stock adapter's, byte for byte, so LM cache keys and answers do not change (tests/test_adapters.py compares
    them).
    """

    MEMO_SIZE = 512  # distinct (signature, demos) parts kept; a run uses a few dozen

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._memo: dict[tuple, Any] = {}
        self._memo_lock = threading.Lock()

    def _memoized(self, key: tuple | None, make):
        if key is None:
            return make()
        with self._memo_lock:
            if key in self._memo:
                return self._memo[key]
        value = make()
        with self._memo_lock:
            if len(self._memo) >= self.MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = value
        return value

    def format_system_message(self, signature) -> str:
        key = _signature_key(signature)
        return self._memoized(key and ("system", key), lambda: super(_PromptPartsMemo, self)
                              .format_system_message(signature))

    def format_demos(self, signature, demos) -> list[dict[str, Any]]:
        key = _signature_key(signature)
        key = key and ("demos", key, tuple(_demo_key(signature, demo) for demo in demos))
        messages = self._memoized(key, lambda: super(_PromptPartsMemo, self).format_demos(signature, demos))
        return [dict(message) for message in messages]  # callers may mutate the messages they get


def _signature_key(signature) -> tuple | None:
    """What a signature's prompt text depends on: instructions, and each field's name, kind, prefix, description
    and type. None (no memo) when a type is unhashable."""
    try:
        key = (signature.instructions, tuple(
            (name, field.annotation, tuple(sorted((k, repr(v)) for k, v in (field.json_schema_extra or {}).items())))
            for name, field in signature.fields.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _demo_key(signature, demo) -> tuple:
    """A demo's content as far as formatting reads it: the signature's fields, present or not."""
    return tuple((name, type(demo[name]).__qualname__, repr(demo[name])) if name in demo else (name,)
                 for name in signature.fields)


class JSONAdapter(_PromptPartsMemo, dspy.JSONAdapter):
    """dspy.JSONAdapter with the system message and demos formatted once per predictor (see _PromptPartsMemo), and
    with a list field's per-call answer bound in the answer's schema (``_bound_answers``)."""

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        super()._prepare_response_format(lm, lm_kwargs, signature)
        _bound_answers(lm_kwargs.get("response_format"), signature)


def _bound_answers(response_format: Any, signature) -> None:
    """Tighten the answer schema of each output field whose type carries an ``answer_bound`` (items, characters per
    item; ``signatures.ClaimList``): a server that turns the schema into a grammar (llama.cpp) ends the list there.
    The prompt keeps the type's own schema, so the cached prompt prefix is the same for every bound."""
    bounds = {name: bound for name, field in signature.output_fields.items()
              if (bound := getattr(field.annotation, "answer_bound", None))}
    if not bounds or not (isinstance(response_format, type) and hasattr(response_format, "model_json_schema")):
        return
    schema = copy.deepcopy(response_format.model_json_schema())
    for name, (items, chars) in bounds.items():
        field_schema = schema.get("properties", {}).get(name)
        if field_schema is None or field_schema.get("type") != "array":
            continue
        field_schema["maxItems"] = items
        if isinstance(field_schema.get("items"), dict):
            field_schema["items"]["maxLength"] = chars
    response_format.model_json_schema = lambda *args, **kwargs: schema  # a model built for this call alone


class ChatAdapter(_PromptPartsMemo, dspy.ChatAdapter):
    """dspy.ChatAdapter with the system message and demos formatted once per predictor (see _PromptPartsMemo)."""


ADAPTERS = {"json": JSONAdapter, "chat": ChatAdapter}


def build_adapter(name: str) -> dspy.Adapter:
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[name]()
