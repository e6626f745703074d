"""FaithDial (the benchmark; on the Hugging Face hub only): Wizard-of-Wikipedia turns, edited where they were
unfaithful."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn
from .errors import InputError
from .fade import roles_backwards
from .loading import LoadReport, finish, gold
from .readers import field_value, read_json, read_objects, under
from .registry import register

FAITHDIAL_HUB = "McGill-NLP/FaithDial"

def _faithdial_records(path: Path, split: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(name, [(where, record)]) from a local file, or from the hub when ``path`` is its id or ``hub``."""
    if path.exists():
        if path.is_dir():
            path = under(path, f"data/{split}.json", f"{split}.json")
        if path.suffix == ".jsonl":
            return path.name, [(f"line {n}", r) for n, r in read_objects(path)]
        data = read_json(path)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError(path, "expected a JSON list of FaithDial dialogues (objects with 'utterances')")
        return path.name, [(f"dialogue {i}", r) for i, r in enumerate(data)]
    if str(path) not in ("hub", FAITHDIAL_HUB):
        raise InputError(path, f"no such file; FaithDial is on the Hugging Face hub only: pass a local copy of "
                               f"{FAITHDIAL_HUB}'s data/{split}.json, or 'hub' to download it (online)")
    import datasets

    from .fetch import hub_cache_dir

    try:  # the copy `vista data get faithdial --source hub` fetched, else a download
        rows = datasets.load_dataset(FAITHDIAL_HUB, split=split, cache_dir=str(hub_cache_dir()))
    except Exception as exc:
        raise InputError(FAITHDIAL_HUB, f"cannot load {split!r} from the Hugging Face hub ({type(exc).__name__}: "
                                        f"{str(exc)[:200]}); run `vista data get faithdial --source hub` online, or "
                                        f"download data/{split}.json from "
                                        f"https://huggingface.co/datasets/{FAITHDIAL_HUB} and pass its path") from None
    return f"{FAITHDIAL_HUB}:{split}", [(f"row {i}", dict(r)) for i, r in enumerate(rows)]


@register("faithdial")
def load_faithdial(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0,
                   split: str = "test") -> list[Dialogue]:
    """FaithDial dialogues (``{"utterances": [{"history", "speaker", "knowledge", "original_response",
    "response", "BEGIN", "VRM"}, ...]}`` per dialogue, or the flat rows of the hub's loading script).

    Every Wizard turn is judged against its ``knowledge``. The judged text is the original Wizard-of-Wikipedia
    turn: ``original_response`` when FaithDial's editors rewrote it (gold hallucinated) and ``response`` when
    they kept it (gold faithful). This is how VISTA's re-annotated FaithDial dialogues read; it is an inference,
    as VISTA publishes no mapping. The Apprentice turn before each Wizard turn is the last item of its
    ``history``; the first Wizard turn's whole history opens the dialogue.
    """
    name, records = _faithdial_records(Path(path), split)
    report = LoadReport("faithdial", files=[name])
    dialogues = []
    for where, record in records:
        utterances = record["utterances"] if "utterances" in record else [record]
        if not isinstance(utterances, list) or not utterances:
            raise InputError(name, "expected a non-empty list", record=where, field="utterances")
        turns: list[Turn] = []
        edited = 0
        for k, utterance in enumerate(utterances):
            at = f"{where} utterance {k}"
            if not isinstance(utterance, dict):
                raise InputError(name, f"expected an object, got {type(utterance).__name__}", record=at)
            history = field_value(Path(name), utterance, "history", at, list)
            if not all(isinstance(t, str) for t in history):
                raise InputError(name, "expected a list of strings", record=at, field="history")
            knowledge = field_value(Path(name), utterance, "knowledge", at, str)
            response = field_value(Path(name), utterance, "response", at, str)
            original = field_value(Path(name), utterance, "original_response", at, str, optional=True)
            hallucinated = bool(original and original.strip())
            edited += hallucinated
            if k == 0:
                turns.extend(roles_backwards(history))
            elif history:
                turns.append(Turn(role="user", text=history[-1]))
            text = original if hallucinated else response
            if not text.strip():
                report.skip("empty response", at)
                continue
            turns.append(Turn(role="assistant", text=text, grounding=Grounding.from_document(knowledge),
                              gold=gold(hallucinated)))
        if not any(t.gold is not None for t in turns):
            continue
        index = where.split()[-1]
        # Flat rows (one per Wizard turn) share their dialogue's dialog_idx; the row index keeps ids unique.
        ident = record.get("dialog_idx", index) if "utterances" in record else index
        dialogues.append(Dialogue(id=f"faithdial-{split}-{ident}", turns=turns, source={
            "dataset": "faithdial", "file": name, "record": where, "dialog_idx": record.get("dialog_idx"),
            "edited_turns": edited}))
    return finish(report, Path(name), dialogues, n, seed)
