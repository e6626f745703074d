"""Chat logs in the OpenAI message shape: one conversation per JSONL line, or a JSON list of them. A conversation
is ``{"messages": [{"role", "content", ...}, ...]}`` (optionally with ``id``); DeepEval's ``turns`` of
``{role, content}`` and a bare list of messages are read the same way.

- ``user`` messages are user turns; ``assistant`` messages with text are judged turns (an assistant message that
  only calls tools is no turn).
- The evidence of an assistant message: the ``tool`` messages since the previous user or assistant text (agentic
  RAG: one passage each), then its own ``retrieval_context`` / ``retrieved_contexts`` / ``context`` field (a string
  or a list of passages). Several passages are numbered for the judge. An assistant message without evidence is
  judged against the knowledge store alone (``knowledge_only``), like a VISTA turn without a retrieved document.
- ``system`` (and ``developer``) messages are the agent's background: each one seeds the knowledge store, wherever
  it stands in the conversation.
- ``gold_label`` ("faithful" / "hallucinated") on an assistant message is its gold label.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..schema import Dialogue, Grounding, Turn, TurnGold
from .errors import InputError
from .readers import check_length, label_field, parse_jsonl, read_text, validation_message
from .registry import register

CONVERSATION_KEYS = ("messages", "turns")
EVIDENCE_FIELDS = ("retrieval_context", "retrieved_contexts", "context")
SYSTEM_ROLES = {"system", "developer"}
TOOL_ROLES = {"tool", "function"}
ROLES = ("user", "assistant", *sorted(SYSTEM_ROLES), *sorted(TOOL_ROLES))
TOOL_CALL_FIELDS = ("tool_calls", "function_call")


def is_message(item: Any) -> bool:
    return isinstance(item, dict) and "role" in item and "content" in item and not {"utterance", "text"} & set(item)


def is_chat_record(item: Any) -> bool:
    """Whether one record of a file is a chat conversation: an object with ``messages``, or with ``turns`` of
    ``{role, content}`` messages, or a list of such messages."""
    if isinstance(item, dict):
        if isinstance(item.get("messages"), list):
            return True
        turns = item.get("turns")
        return isinstance(turns, list) and bool(turns) and is_message(turns[0])
    return isinstance(item, list) and bool(item) and is_message(item[0])


@register("chat")
def load_chat(path: str | Path, data: Any = None) -> list[Dialogue]:
    """Chat conversations from JSONL (``data`` None) or from an already parsed JSON list."""
    path = Path(path)
    if data is None:
        records = [(f"line {number}", item) for number, item in parse_jsonl(path, read_text(path))]
    elif isinstance(data, list):
        records = [(f"conversation {i}", item) for i, item in enumerate(data)]
    else:
        raise InputError(path, f"expected a JSON list of conversations, got {type(data).__name__}")
    return [dialogue_from_chat(path, where, item, i) for i, (where, item) in enumerate(records)]


def dialogue_from_chat(path: Path, where: str, item: Any, index: int) -> Dialogue:
    """One conversation as a ``Dialogue``; ``where`` names the record in errors (``line 3``, ``row 2``)."""
    messages, record = _messages(path, where, item)
    turns: list[Turn] = []
    background: list[str] = []
    tool_passages: list[str] = []
    for m, message in enumerate(messages):
        at = f"{where}, message {m}"
        if not isinstance(message, dict):
            raise InputError(path, f"expected a message object, got {type(message).__name__}", record=at)
        message = {k: v for k, v in message.items() if v is not None}  # a datasets table fills absent keys with None
        role = _role(path, at, message)
        text = _content(path, at, message)
        if role != "assistant":
            misplaced = next((name for name in EVIDENCE_FIELDS if message.get(name)), None)  # [] or "" is no evidence
            if misplaced:
                raise InputError(path, f"passages belong on the assistant message that used them, not on a {role} "
                                       "message", record=at, field=misplaced)
        if role in SYSTEM_ROLES:
            if text:
                background.append(text)
        elif role in TOOL_ROLES:
            if text:
                tool_passages.append(text)
        elif role == "user":
            if not text:
                raise InputError(path, "no text", record=at, field="content")
            turns.append(Turn(role="user", text=text))
            tool_passages = []  # tool results no assistant text answered are nobody's evidence
        elif text:
            turns.append(_assistant_turn(path, at, message, text, tool_passages + _evidence(path, at, message)))
            tool_passages = []
        elif not any(name in message for name in TOOL_CALL_FIELDS):
            raise InputError(path, "an assistant message without text (and without tool calls)", record=at,
                             field="content")
    if not turns:
        raise InputError(path, "no user or assistant message with text", record=where)
    return Dialogue(id=_identifier(path, where, record, index), turns=turns, background=background,
                    source={"file": path.name, "index": index, "format": "chat"})


def _messages(path: Path, where: str, item: Any) -> tuple[list[Any], dict[str, Any]]:
    """The messages of a conversation record, and the record itself (empty for a bare list)."""
    if isinstance(item, list):
        messages, record = item, {}
    elif isinstance(item, dict):
        key = next((k for k in CONVERSATION_KEYS if k in item), None)
        if key is None:
            raise InputError(path, "a conversation needs its messages", record=where, field="messages")
        messages, record = item[key], item
        if not isinstance(messages, list):
            raise InputError(path, f"expected a list of messages, got {type(messages).__name__}", record=where,
                             field=key)
    else:
        raise InputError(path, f"expected a conversation (an object with messages), got {type(item).__name__}",
                         record=where)
    if not messages:
        raise InputError(path, "empty conversation (no messages)", record=where)
    return messages, record


def _role(path: Path, at: str, message: dict[str, Any]) -> str:
    role = message.get("role")
    if not isinstance(role, str) or role.strip().lower() not in ROLES:
        raise InputError(path, f"expected one of {', '.join(ROLES)}, got {role!r}", record=at, field="role")
    return role.strip().lower()


def _content(path: Path, at: str, message: dict[str, Any]) -> str:
    """The message's text: a string, or the text parts of a list of content parts; "" when it has none."""
    content = message.get("content", "")
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type", "text") != "text":
                continue  # an image or audio part carries no text
            else:
                raise InputError(path, "expected a text part {\"type\": \"text\", \"text\": ...}", record=at,
                                 field=f"content[{k}]")
        content = "\n".join(parts)
    if not isinstance(content, str):
        raise InputError(path, f"expected text or a list of content parts, got {type(content).__name__}", record=at,
                         field="content")
    check_length(path, at, "content", content)
    return content.strip()


def _evidence(path: Path, at: str, message: dict[str, Any]) -> list[str]:
    """The passages of an assistant message's own evidence field (a string or a list of strings)."""
    present = [name for name in EVIDENCE_FIELDS if name in message]
    if len(present) > 1:
        raise InputError(path, f"give the passages in one field, not in {' and '.join(present)}", record=at,
                         field=present[1])
    if not present:
        return []
    name, value = present[0], message[present[0]]
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list):
        raise InputError(path, f"expected a passage or a list of passages, got {type(value).__name__}", record=at,
                         field=name)
    passages = []
    for k, passage in enumerate(values):
        field = name if isinstance(value, str) else f"{name}[{k}]"
        if not isinstance(passage, str):
            raise InputError(path, f"expected a passage text, got {type(passage).__name__}", record=at, field=field)
        check_length(path, at, field, passage)
        if passage.strip():
            passages.append(passage.strip())
    return passages


def _assistant_turn(path: Path, at: str, message: dict[str, Any], text: str, passages: list[str]) -> Turn:
    gold = None
    if "gold_label" in message:
        gold = TurnGold(label=label_field(message["gold_label"], path, at, "gold_label"))
    try:
        grounding = Grounding.from_passages(passages) if passages else Grounding.knowledge_only()
    except ValidationError as exc:
        raise InputError(path, validation_message(exc)[1], record=at,
                         field=next((n for n in EVIDENCE_FIELDS if n in message), "passages")) from None
    return Turn(role="assistant", text=text, grounding=grounding, gold=gold)


def _identifier(path: Path, where: str, record: dict[str, Any], index: int) -> str:
    for key in ("id", "conversation_id"):
        value = record.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
            raise InputError(path, f"expected a non-empty string or an integer, got {value!r}", record=where,
                             field=key)
        return str(value)
    return f"{path.stem}-{index}"
