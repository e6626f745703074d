"""The trainers' reward call read for VISTA: ``prompts`` and ``completions`` as plain strings or chat messages, and
the dataset's columns (one value per completion) holding each completion's passages and background facts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# Where a dataset keeps a turn's passages (the first one present is read), and its background facts / persona.
PASSAGE_COLUMNS = ("retrieved_context", "retrieved_contexts", "context", "document")
BACKGROUND_COLUMNS = ("background", "persona")


@dataclass(frozen=True)
class TrainerRow:
    """One completion of a reward call, in the form ``dialogues.response_dialogue`` reads."""

    history: str | list[dict[str, str]]  # the prompt: ``role: text`` lines, or messages
    response: str
    passages: list[str]
    background: list[str]


def trainer_rows(prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any], *,
                 passage_column: str | None = None, background_column: str | None = None) -> Iterator[TrainerRow]:
    """Each completion of the call with its prompt, passages and background, in order. A batch without a passage
    column, a column without one value per completion, or a value of the wrong type raises ``ValueError`` naming
    it."""
    n = len(completions)
    passage_name = find_column(columns, passage_column, PASSAGE_COLUMNS, required=True)
    background_name = find_column(columns, background_column, BACKGROUND_COLUMNS, required=False)
    passages = per_completion(columns, passage_name, n)
    backgrounds = per_completion(columns, background_name, n) if background_name else [None] * n
    for i in range(n):
        history = prompt_history(prompts[i], i)
        response = completion_text(completions[i], i)
        yield TrainerRow(history, response, _cell_texts(passages[i], passage_name, i),
                         _cell_texts(backgrounds[i], background_name, i))


def find_column(columns: dict[str, Any], chosen: str | None, names: Sequence[str], *, required: bool) -> str | None:
    """``chosen`` if given (it must be there), else the first of ``names`` present (``required``: one must be)."""
    if chosen is not None:
        if chosen not in columns:
            raise ValueError(f"no column {chosen!r} in the batch (columns: {', '.join(sorted(columns)) or 'none'})")
        return chosen
    found = next((name for name in names if name in columns), None)
    if found is None and required:
        raise ValueError(
            "VistaReward needs each completion's passages in a column named one of "
            f"{', '.join(names)} (the batch has: {', '.join(sorted(columns)) or 'no column'}); name yours with "
            "passage_column=")
    return found


def per_completion(columns: dict[str, Any], name: str, n: int) -> list[Any]:
    values = columns[name]
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Sequence) or len(values) != n:
        raise ValueError(f"column {name!r}: expected one value per completion ({n}), as trainers pass dataset "
                         f"columns; got {describe(values)}")
    return list(values)


def message_text(content: Any) -> str:
    """A chat message's content as text: a string, or a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return str(content)


def completion_text(completion: Any, index: int) -> str:
    """The text of a completion: a string, a message, or a list of messages (the assistant's joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return message_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        if messages:
            return "\n".join(message_text(m.get("content")) for m in messages)
    raise ValueError(f"completion {index}: expected a text or a list of chat messages with an assistant message, "
                     f"not {describe(completion)}")


def prompt_history(prompt: Any, index: int) -> str | list[dict[str, str]]:
    """A prompt as VistaMetric reads a history: text (``role: text`` lines, or one user message) or messages."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and all(isinstance(m, dict) and "role" in m for m in prompt):
        return [{"role": str(m["role"]), "content": message_text(m.get("content"))} for m in prompt]
    raise ValueError(f"prompt {index}: expected a text or a list of chat messages ({{'role', 'content'}}), not "
                     f"{describe(prompt)}")


def texts(value: Any) -> list[str]:
    """Passages or background facts as given: a text or a list of texts (None: none), blank ones dropped;
    ``TypeError`` for anything else (the caller says where it was)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise TypeError(f"expected a text or a list of texts, not {describe(value)}")


def _cell_texts(value: Any, column: str | None, index: int) -> list[str]:
    try:
        return texts(value)
    except TypeError as exc:
        raise ValueError(f"column {column!r}, completion {index}: {exc}") from None


def describe(value: Any) -> str:
    """A value in an error message: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


__all__ = ["BACKGROUND_COLUMNS", "PASSAGE_COLUMNS", "TrainerRow", "completion_text", "describe", "find_column",
           "message_text", "per_completion", "prompt_history", "texts", "trainer_rows"]
