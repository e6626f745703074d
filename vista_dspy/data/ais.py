"""AIS (Wizard-of-Wikipedia portion): system outputs rated for attribution to the checked sentence."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn
from .errors import InputError
from .loading import LoadReport, finish, gold
from .readers import CSV, existing_file, read_json, read_table, under
from .registry import register

WOW_ENV = "VISTA_WOW_TEST"
WOW_FILE = "test_random_split.json"
WOW_URL = "http://parl.ai/downloads/wizard_of_wikipedia/wizard_of_wikipedia.tgz"

AIS_COLUMNS = ("ex-idx", "model-name", "output", "INT & AIS")
NO_PASSAGE = "no_passages_used"


def _wow_role(path: Path, speaker: Any, where: str) -> str:
    name = str(speaker).strip().lower()
    if name.endswith("wizard"):
        return "assistant"
    if name.endswith("apprentice"):
        return "user"
    raise InputError(path, f"unknown speaker {speaker!r}; expected a name ending in Wizard or Apprentice",
                     record=where, field="speaker")


@register("ais")
def load_ais(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0,
             wow_path: str | Path | None = None) -> list[Dialogue]:
    """AIS ``ann_wow.csv`` (or a directory holding it), joined with Wizard of Wikipedia ``test_random_split.json``.

    The WoW file comes from ``wow_path``, else the ``VISTA_WOW_TEST`` environment variable, else
    ``test_random_split.json`` next to the CSV; it is in ParlAI's ``wizard_of_wikipedia.tgz``. Join: ``ex-idx`` is
    ``convo_no:turn_no``; ``dialog = wow[convo_no]['dialog']``; the history is ``dialog[i]['text']`` for
    ``i < turn_no`` (speaker ...Wizard -> assistant, ...Apprentice -> user; history assistant turns are background);
    the judged turn is the AIS ``output`` (not the WoW text, kept as ``source['wow_text']``) judged against the single
    value of ``dialog[turn_no]['checked_sentence']``; rows whose wizard used no passage are skipped.
    """
    path = under(Path(path), "ann_wow.csv")
    if "qrecc" in path.name.lower():
        raise InputError(path, "QReCC rows need the SCAI-QReCC-21 passages, which are not supported; use ann_wow.csv")
    existing_file(path)
    if wow_path is None:
        wow_path = os.environ.get(WOW_ENV) or path.parent / WOW_FILE
    wow_path = Path(wow_path)
    if not wow_path.is_file():
        raise InputError(wow_path, f"Wizard-of-Wikipedia test file not found; AIS rows of {path.name} need it for "
                                   f"the history and the passage. Get {WOW_FILE} from ParlAI's {WOW_URL} (unpack "
                                   f"the archive) and pass wow_path= or set {WOW_ENV}")
    report = LoadReport("ais", files=[path.name, wow_path.name])
    _, rows = read_table(path, CSV, AIS_COLUMNS, report)
    wow = read_json(wow_path)
    if not isinstance(wow, list):
        raise InputError(wow_path, f"expected a JSON list of dialogues, got {type(wow).__name__}")
    dialogues = []
    for row in rows:
        v = row.values
        match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", v["ex-idx"])
        if match is None:
            raise InputError(path, f"expected convo_no:turn_no, got {v['ex-idx']!r}", record=row.where, field="ex-idx")
        convo_no, turn_no = int(match.group(1)), int(match.group(2))
        label = v["INT & AIS"].strip()
        if label not in ("0", "1"):
            raise InputError(path, f"expected 0 or 1, got {label!r}", record=row.where, field="INT & AIS")
        if not v["output"].strip():
            raise InputError(path, "empty", record=row.where, field="output")
        join = f"dialogue {convo_no} (from {path.name} {row.where}, ex-idx {v['ex-idx'].strip()})"
        if convo_no >= len(wow) or not isinstance(wow[convo_no], dict) or not isinstance(
                wow[convo_no].get("dialog"), list):
            raise InputError(wow_path, f"no such dialogue (the file has {len(wow)}); is this {WOW_FILE}?",
                             record=join)
        dialog = wow[convo_no]["dialog"]
        if turn_no >= len(dialog) or not all(isinstance(t, dict) for t in dialog[: turn_no + 1]):
            raise InputError(wow_path, f"no turn {turn_no} (the dialogue has {len(dialog)}); is this {WOW_FILE}?",
                             record=join)
        target = dialog[turn_no]
        if _wow_role(wow_path, target.get("speaker"), f"{join}, turn {turn_no}") != "assistant":
            raise InputError(wow_path, f"turn {turn_no} is not a Wizard turn; is this {WOW_FILE}?", record=join,
                             field="speaker")
        checked = target.get("checked_sentence")
        if not isinstance(checked, dict):
            raise InputError(wow_path, "expected an object", record=f"{join}, turn {turn_no}",
                             field="checked_sentence")
        if len(checked) > 1:
            raise InputError(wow_path, f"expected a single sentence, got {len(checked)}",
                             record=f"{join}, turn {turn_no}", field="checked_sentence")
        passage = next(iter(checked.values()), NO_PASSAGE)
        if not isinstance(passage, str) or not passage.strip() or passage == NO_PASSAGE:
            report.skip("no checked sentence in WoW (no_passages_used)", row.where)
            continue
        turns = []
        for i, turn in enumerate(dialog[:turn_no]):
            text = turn.get("text")
            if not isinstance(text, str):
                raise InputError(wow_path, "missing or not a string", record=f"{join}, turn {i}", field="text")
            role = _wow_role(wow_path, turn.get("speaker"), f"{join}, turn {i}")
            turns.append(Turn(role=role, text=text, grounding=Grounding.background() if role == "assistant" else None))
        turns.append(Turn(role="assistant", text=v["output"], grounding=Grounding.from_document(passage),
                          gold=gold(label == "0")))
        dialogues.append(Dialogue(id=f"ais-wow-{row.number}", turns=turns, source={
            "dataset": "ais", "file": path.name, "row": row.number, "line": row.line, "wow_file": wow_path.name,
            "ex_idx": f"{convo_no}:{turn_no}", "convo_no": convo_no, "turn_no": turn_no, "model": v["model-name"],
            "int": v.get("INT", "").strip(), "flagged": v.get("Flagged", "").strip(),
            "checked_sentence_key": next(iter(checked), None), "topic": wow[convo_no].get("chosen_topic"),
            "wow_text": target.get("text"),
        }))
    return finish(report, path, dialogues, n, seed)
