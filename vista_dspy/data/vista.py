"""VISTA's own JSON input format (optionally with human annotations), and JSONL of ``Dialogue`` records.

VISTA format: a JSON list of conversations, each a list of turns ``{role, utterance, retrieved_document?}``.
``retrieved_document``: a text -> judged against it; "N/A" -> background (not judged, claims join the store);
missing, "NONE" or "Prompt Information" -> judged against the knowledge store only. Annotated files add
``human_claims``, ``gold_label``, ``original_dataset_label``, ``conversation_id``, ``dataset``, ``turn_index``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..schema import Category, Dialogue, GoldClaim, Grounding, Turn, TurnGold
from .errors import InputError
from .readers import (
    check_length,
    dialogue_from_dict,
    first_jsonl_record,
    label_field,
    parse_jsonl,
    read_json,
    read_text,
)
from .registry import register

ROLES = {"user": "user", "apprentice": "user", "assistant": "assistant", "wizard": "assistant"}
BACKGROUND_MARKERS = {"N/A"}
KNOWLEDGE_ONLY_MARKERS = {"NONE", "Prompt Information"}
JUDGEMENTS = {
    "verifiable": Category.VERIFIED,
    "out of scope": Category.OUT_OF_SCOPE,
    "lacking evidence": Category.LACKING_EVIDENCE,
    "abstention": Category.ABSTENTION,
    "contradicted": Category.CONTRADICTED,
}
KNOWN_KEYS = {
    "role", "utterance", "retrieved_document", "human_claims", "gold_label", "original_dataset_label",
}
# Wizard-of-Wikipedia role names in human claims, rewritten to the roles the judge sees in the history.
# "the wizard governing body" (Harry Potter) is not a speaker: skip the attributive uses seen in the data.
_NOT_SPEAKER = r"(?!\s+(?:governing|world|community|school)\b)"
SPEAKERS = [
    (re.compile(rf"\bthe wizard\b{_NOT_SPEAKER}", re.I), "the assistant"),
    (re.compile(rf"\bthe apprentice\b{_NOT_SPEAKER}", re.I), "the user"),
]


def normalize_speakers(text: str) -> str:
    for pattern, replacement in SPEAKERS:
        text = pattern.sub(lambda m, r=replacement: r.capitalize() if m.group(0)[0].isupper() else r, text)
    return text


def grounding_from_vista(value: Any, path: Path, record: str) -> Grounding:
    if value is None:
        return Grounding.knowledge_only()
    if not isinstance(value, str):
        raise InputError(path, f"expected a string, got {type(value).__name__}", record=record,
                         field="retrieved_document")
    text = value.strip()
    if text in BACKGROUND_MARKERS:
        return Grounding.background()
    if not text or text in KNOWLEDGE_ONLY_MARKERS:
        return Grounding.knowledge_only()
    check_length(path, record, "retrieved_document", value)
    return Grounding.from_document(value)


def _gold_claims(value: Any, path: Path, record: str) -> list[GoldClaim]:
    if not isinstance(value, list):
        raise InputError(path, f"expected a list, got {type(value).__name__}", record=record, field="human_claims")
    claims = []
    for k, item in enumerate(value):
        field = f"human_claims[{k}]"
        if not isinstance(item, dict):
            raise InputError(path, "expected an object with claim_text and human_judgement", record=record,
                             field=field)
        text, judgement = item.get("claim_text"), item.get("human_judgement")
        if not isinstance(text, str) or not text.strip():
            raise InputError(path, "missing or empty claim text", record=record, field=f"{field}.claim_text")
        if not isinstance(judgement, str) or judgement.strip().lower() not in JUDGEMENTS:
            raise InputError(path, f"unknown judgement {judgement!r}; expected one of {', '.join(JUDGEMENTS)}",
                             record=record, field=f"{field}.human_judgement")
        claims.append(GoldClaim(text=normalize_speakers(text.strip()), category=JUDGEMENTS[judgement.strip().lower()]))
    return claims


def turn_from_vista(data: Any, path: Path, record: str) -> Turn:
    if not isinstance(data, dict):
        raise InputError(path, f"expected a turn object, got {type(data).__name__}", record=record)
    role = data.get("role")
    if not isinstance(role, str) or role.strip().lower() not in ROLES:
        raise InputError(path, f"expected one of {', '.join(ROLES)}, got {role!r}", record=record, field="role")
    role = ROLES[role.strip().lower()]
    text = data.get("utterance")
    if not isinstance(text, str):
        raise InputError(path, "missing or not a string", record=record, field="utterance")
    if not text.strip():
        raise InputError(path, "empty utterance", record=record, field="utterance")
    check_length(path, record, "utterance", text)
    meta = {k: v for k, v in data.items() if k not in KNOWN_KEYS}
    if role == "user":
        return Turn(role="user", text=text, meta=meta)
    gold = None
    if any(k in data for k in ("human_claims", "gold_label", "original_dataset_label")):
        gold = TurnGold(
            label=label_field(data.get("gold_label"), path, record, "gold_label"),
            original_label=label_field(data.get("original_dataset_label"), path, record, "original_dataset_label"),
            claims=_gold_claims(data["human_claims"], path, record) if "human_claims" in data else None,
        )
    grounding = grounding_from_vista(data.get("retrieved_document"), path, record)
    if gold is not None and not grounding.judged:
        raise InputError(path, "a turn marked N/A (not judged) cannot carry gold annotations", record=record,
                         field="retrieved_document")
    return Turn(role="assistant", text=text, grounding=grounding, gold=gold, meta=meta)


@register("vista")
def load_vista_json(path: str | Path, data: Any = None) -> list[Dialogue]:
    path = Path(path)
    data = read_json(path) if data is None else data
    if not isinstance(data, list):
        raise InputError(path, f"expected a JSON list of conversations, got {type(data).__name__}")
    return [dialogue_from_vista(path, f"conversation {c}", conversation, c) for c, conversation in enumerate(data)]


def dialogue_from_vista(path: Path, where: str, conversation: Any, index: int) -> Dialogue:
    """One conversation (a list of VISTA turns); its id is ``<dataset>-<conversation_id>`` when its turns say
    both, else ``<file stem>-<index>``."""
    if not isinstance(conversation, list):
        raise InputError(path, f"expected a list of turns, got {type(conversation).__name__}", record=where)
    if not conversation:
        raise InputError(path, "empty conversation (no turns)", record=where)
    turns = [turn_from_vista(t, path, f"{where}, turn {i}") for i, t in enumerate(conversation)]
    source: dict[str, Any] = {"file": path.name, "index": index}
    for key in ("dataset", "conversation_id"):
        values = {t.meta[key] for t in turns if key in t.meta and isinstance(t.meta[key], (str, int))}
        if len(values) == 1:
            source[key] = values.pop()
    if "dataset" in source and "conversation_id" in source:
        dialogue_id = f"{source['dataset']}-{source['conversation_id']}"
    else:
        dialogue_id = f"{path.stem}-{index}"
    return Dialogue(id=dialogue_id, turns=turns, source=source)


@register("dialogues")
def load_dialogue_records(path: str | Path, data: Any = None) -> list[Dialogue]:
    """JSONL, one ``Dialogue`` record per line (blank lines allowed), or a JSON list of records."""
    path = Path(path)
    if path.suffix != ".jsonl":
        data = read_json(path) if data is None else data
        if not isinstance(data, list):
            raise InputError(path, f"expected a JSON list of dialogue records, got {type(data).__name__}")
        return [dialogue_from_dict(path, f"record {i}", item) for i, item in enumerate(data)]
    return [dialogue_from_dict(path, f"line {number}", item) for number, item in parse_jsonl(path, read_text(path))]


def detect_format(path: str | Path, data: Any = None) -> str:
    """'chat' when the first conversation is in the chat shape (``messages``, or turns of ``{role, content}``);
    else 'dialogues' for .jsonl or a JSON list of objects with 'turns'; 'vista' otherwise (a list of lists)."""
    from .chat import is_chat_record

    if Path(path).suffix == ".jsonl":
        return "chat" if is_chat_record(first_jsonl_record(path)) else "dialogues"
    if isinstance(data, list) and data and is_chat_record(data[0]):
        return "chat"
    if isinstance(data, list) and data and isinstance(data[0], dict) and "turns" in data[0]:
        return "dialogues"
    return "vista"
