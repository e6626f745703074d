"""The probability a model gives each label of a stage, read from the endpoint's token log-probabilities.

An answer is asked with ``logprobs`` and ``top_logprobs`` (``REQUEST``): llama.cpp's server, vLLM and OpenAI-style
endpoints then return, for every generated token, the most likely tokens at that position. At the first token of a
label's value (after ``"label": "`` in a JSON answer, or ``[[ ## label ## ]]`` in a chat answer) those alternatives
are the model's own distribution over the labels: each alternative that spells the beginning of exactly one label
counts for that label, and the masses are normalised over the labels. Under a JSON-schema grammar the alternatives
are the raw distribution before the grammar; the grammar-forced token's own probability is never used.

Several values of one field in one answer (a batched answer, one per numbered claim) give one distribution each, in
the order they appear. Where the endpoint gave no log-probabilities, or a value cannot be located, the distribution
is None: nothing is guessed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

# Alternatives per generated token (the most OpenAI-style endpoints return).
TOP_LOGPROBS = 20
REQUEST: dict[str, Any] = {"logprobs": True, "top_logprobs": TOP_LOGPROBS}

Distribution = dict[str, float]


def _get(obj: Any, key: str) -> Any:
    """A field of a provider object or of a plain dict (litellm returns objects, DSPy's native engine dicts)."""
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def _tokens(logprobs: Any) -> list[tuple[str, list[tuple[str, float]]]] | None:
    """[(generated token, [(alternative, logprob), ...]), ...], or None when there are none."""
    content = _get(logprobs, "content") if logprobs is not None else None
    if not content:
        return None
    tokens = []
    for entry in content:
        token = _get(entry, "token")
        if token is None:
            return None
        tops = [(_get(top, "token"), _get(top, "logprob")) for top in (_get(entry, "top_logprobs") or [])]
        tokens.append((token, [(t, float(lp)) for t, lp in tops if t is not None and lp is not None]))
    return tokens


@lru_cache(maxsize=64)
def _value_start(field: str) -> re.Pattern:
    """Where a field's value begins: after ``"field": "`` (JSON) or ``[[ ## field ## ]]`` and blanks (chat)."""
    name = re.escape(field)
    return re.compile(rf'(?<!\\)"{name}"\s*:\s*"|\[\[ ## {name} ## \]\][ \t]*\n?[ \t]*')


def label_distributions(logprobs: Any, field: str, labels: Sequence[str]) -> list[Distribution | None]:
    """One distribution over ``labels`` per value of ``field`` in the answer, in order (empty when the answer
    carries no log-probabilities)."""
    tokens = _tokens(logprobs)
    if tokens is None:
        return []
    text = "".join(token for token, _ in tokens)
    ends, position = [], 0
    for token, _ in tokens:
        position += len(token)
        ends.append(position)
    found: list[Distribution | None] = []
    index = 0
    for match in _value_start(field).finditer(text):
        start = match.end()
        while index < len(tokens) and ends[index] <= start:
            index += 1
        if index == len(tokens):
            found.append(None)
            continue
        lead = text[ends[index] - len(tokens[index][0]):start]  # the part of the token before the value
        found.append(_distribution(tokens[index][1], lead, labels))
    return found


def _distribution(alternatives: list[tuple[str, float]], lead: str, labels: Sequence[str]) -> Distribution | None:
    """The labels' shares of the alternatives at a value's first token. An alternative counts for a label when,
    after ``lead`` (text of the token before the value), it spells the label's beginning (or the whole label and
    more); one that could begin two labels makes the position unreadable (None)."""
    mass = dict.fromkeys(labels, 0.0)
    for token, logprob in alternatives:
        if not token.startswith(lead) or len(token) == len(lead):
            continue
        rest = token[len(lead):]
        matching = [label for label in labels if label.startswith(rest) or rest.startswith(label)]
        if len(matching) > 1:
            return None
        if matching:
            mass[matching[0]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {label: value / total for label, value in mass.items()}


def label_distribution(logprobs: Any, field: str, labels: Sequence[str]) -> Distribution | None:
    """The distribution at the first value of ``field`` (a one-label answer), or None."""
    found = label_distributions(logprobs, field, labels)
    return found[0] if found else None
