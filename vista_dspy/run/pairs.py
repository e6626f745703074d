"""Preference pairs for DPO from VISTA's verdicts: N responses per prompt judged by a ``VistaReward``, and pairs of
a higher-rewarded (chosen) and a lower-rewarded (rejected) response written in the ``prompt`` / ``chosen`` /
``rejected`` shape TRL's DPOTrainer reads, with the margin and both verdicts. Ties and unjudged responses are
never paired.

Input, one JSON object per line (JSON Lines)::

    {"id": "q17",                                  (optional; default: the line number)
     "prompt": "user: ..." | [{"role": "user", "content": "..."}, ...],
     "responses": ["...", "..."] | [[{"role": "assistant", "content": "..."}], ...],   (at least two)
     "document": "..." | ["passage", ...],         (or retrieved_context, retrieved_contexts, context)
     "background": "..." | ["fact", ...]}          (optional; or persona)

Output, one pair per line, in TRL's preference format matching the prompt's: a text prompt gives ``chosen`` and
``rejected`` as texts (its standard format), a chat prompt gives each as a list holding the assistant's message (its
conversational format); then ``margin`` (chosen's
reward - rejected's), ``chosen_reward`` / ``rejected_reward``, ``chosen_verdict`` / ``rejected_verdict`` (label,
VISTA score, each claim's category and reason), ``id`` and ``shape``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.errors import InputError
from ..data.readers import check_length, parse_jsonl, read_text
from .outdir import replace_lines
from .reward import VistaReward
from .reward_records import RewardVerdict
from .trainer_args import BACKGROUND_COLUMNS, PASSAGE_COLUMNS, completion_text, texts

PAIRINGS = ("best-worst", "all")


@dataclass(frozen=True)
class Group:
    """One input line: a prompt, its responses, its passages and background."""

    id: str
    line: int
    prompt: Any
    responses: list[Any]
    passages: list[str]
    background: list[str] = field(default_factory=list)


@dataclass
class PairsSummary:
    prompts: int = 0
    responses: int = 0
    unjudged: int = 0  # responses without a reward (never paired)
    pairs: int = 0
    unpaired_prompts: int = 0  # prompts whose judged responses all tied (or fewer than two were judged)


def read_groups(path: str | Path) -> list[Group]:
    """The groups of a pairs input file; bad input raises ``InputError`` naming the file, the line and the field."""
    groups = []
    for number, record in parse_jsonl(path, read_text(path)):
        where = f"line {number}"
        if not isinstance(record, dict):
            raise InputError(path, f"expected a JSON object, got {type(record).__name__}", record=where)
        prompt = record.get("prompt")
        if isinstance(prompt, str):
            check_length(path, where, "prompt", prompt)
        elif not (isinstance(prompt, list) and prompt and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in prompt)):
            raise InputError(path, "expected a text or a non-empty list of chat messages ({'role', 'content'})",
                             record=where, field="prompt")
        responses = record.get("responses")
        if not isinstance(responses, list) or len(responses) < 2:
            raise InputError(path, "expected a list of at least two responses (texts or lists of chat messages)",
                             record=where, field="responses")
        for i, response in enumerate(responses):
            try:
                check_length(path, where, f"responses[{i}]", completion_text(response, i))
            except ValueError as exc:
                if isinstance(exc, InputError):
                    raise
                raise InputError(path, "expected a text or a list of chat messages with an assistant message",
                                 record=where, field=f"responses[{i}]") from None
        passage_name = next((name for name in PASSAGE_COLUMNS if name in record), None)
        if passage_name is None:
            raise InputError(path, f"no passages: expected one of the fields {', '.join(PASSAGE_COLUMNS)} (a text or "
                                   "a list of texts; empty for a turn judged against the dialogue alone)",
                             record=where)
        background_name = next((name for name in BACKGROUND_COLUMNS if name in record), None)
        record_id = record.get("id", str(number))
        if not isinstance(record_id, (str, int)):
            raise InputError(path, "expected a text or a number", record=where, field="id")
        groups.append(Group(str(record_id), number, prompt, responses,
                            _field_texts(path, where, passage_name, record[passage_name]),
                            _field_texts(path, where, background_name, record[background_name]) if background_name
                            else []))
    return groups


def _field_texts(path: str | Path, where: str, name: str, value: Any) -> list[str]:
    """A passage or background field: a text or a list of texts (``trainer_args.texts``), each of a readable
    length."""
    try:
        values = texts(value)
    except TypeError:
        raise InputError(path, "expected a text or a list of texts", record=where, field=name) from None
    for v in values:
        check_length(path, where, name, v)
    return values


def judge_groups(groups: Sequence[Group], reward: VistaReward, *, batch_prompts: int = 32
                 ) -> Iterator[tuple[Group, list[RewardVerdict]]]:
    """Each group with its responses' verdicts, ``batch_prompts`` prompts per reward call (their responses judged
    concurrently, each prompt's common ground once)."""
    for start in range(0, len(groups), max(1, batch_prompts)):
        chunk = groups[start:start + max(1, batch_prompts)]
        rows = [(g, r) for g in chunk for r in g.responses]
        columns = {reward.passage_column or "document": [g.passages for g, _ in rows],
                   reward.background_column or "background": [g.background for g, _ in rows]}
        verdicts = reward.judge_batch([g.prompt for g, _ in rows], [r for _, r in rows], **columns)
        position = 0
        for group in chunk:
            yield group, verdicts[position:position + len(group.responses)]
            position += len(group.responses)


def preference_pairs(group: Group, verdicts: Sequence[RewardVerdict], *, pairing: str = "best-worst",
                     min_margin: float = 0.0, shape: str = "") -> list[dict[str, Any]]:
    """The pairs of one group: ``best-worst`` pairs its highest-rewarded response with its lowest (the first of
    equals, in input order); ``all`` pairs every two. A pair needs a margin above ``min_margin`` (so no tie is ever
    paired) and two judged responses."""
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}: {', '.join(PAIRINGS)}")
    judged = [(i, v.reward) for i, v in enumerate(verdicts) if v.reward is not None]
    if pairing == "best-worst" and judged:
        best = max(judged, key=lambda item: item[1])  # max/min keep the first of equals
        worst = min(judged, key=lambda item: item[1])
        candidates = [(best[0], worst[0])]
    else:
        candidates = [(a, b) for a, _ in judged for b, _ in judged if a != b]
    pairs = []
    for chosen, rejected in candidates:
        margin = verdicts[chosen].reward - verdicts[rejected].reward
        if margin > min_margin:
            pairs.append({
                "id": group.id, "prompt": group.prompt,
                "chosen": trl_response(group.prompt, group.responses[chosen]),
                "rejected": trl_response(group.prompt, group.responses[rejected]),
                "margin": margin, "chosen_reward": verdicts[chosen].reward,
                "rejected_reward": verdicts[rejected].reward,
                "chosen_verdict": verdicts[chosen].to_dict(), "rejected_verdict": verdicts[rejected].to_dict(),
                "shape": shape,
            })
    return pairs


def trl_response(prompt: Any, response: Any) -> Any:
    """A response in the preference format of its prompt, as TRL reads a pair: all texts when the prompt is a text
    (TRL's standard format); the assistant's message in a list when the prompt is chat messages (its
    conversational format, which the trainer's chat-template step renders)."""
    if isinstance(prompt, str):
        return completion_text(response, 0)
    if isinstance(response, str):
        return [{"role": "assistant", "content": response}]
    messages = [response] if isinstance(response, dict) else list(response)
    return [{**m, "role": "assistant"} for m in messages if m.get("role", "assistant") == "assistant"]


def write_pairs(groups: Sequence[Group], reward: VistaReward, out: str | Path, *, pairing: str = "best-worst",
                min_margin: float = 0.0, batch_prompts: int = 32) -> PairsSummary:
    """Judge the groups' responses and write their pairs to ``out`` (JSON Lines, replaced atomically)."""
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}: {', '.join(PAIRINGS)}")
    summary = PairsSummary()
    lines: list[bytes] = []
    for group, verdicts in judge_groups(groups, reward, batch_prompts=batch_prompts):
        pairs = preference_pairs(group, verdicts, pairing=pairing, min_margin=min_margin, shape=reward.shape)
        summary.prompts += 1
        summary.responses += len(verdicts)
        summary.unjudged += sum(v.reward is None for v in verdicts)
        summary.pairs += len(pairs)
        summary.unpaired_prompts += not pairs
        lines.extend(json.dumps(pair, ensure_ascii=False).encode() + b"\n" for pair in pairs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    replace_lines(out, lines)
    return summary
