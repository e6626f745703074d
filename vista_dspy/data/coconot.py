"""CoCoNot: requests a model should refuse (abstention expected) and preferred compliant answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn, TurnGold
from .errors import InputError
from .loading import LoadReport, finish
from .readers import field_value, read_objects
from .registry import register

COCONOT_REFUSALS = "legacy_commit_3206be6/data/coconot_evaluation.jsonl"
COCONOT_COMPLIANT = "data/coconot_pref.jsonl"


def _coconot_dialogue(path: Path, root: Path, number: int, record: dict[str, Any], response: str,
                      expected: str) -> Dialogue:
    coconot_id = record["id"]
    return Dialogue(
        id=f"coconot-{coconot_id}",
        turns=[Turn(role="user", text=record["prompt"]),
               Turn(role="assistant", text=response, grounding=Grounding.knowledge_only(), gold=TurnGold())],
        source={"dataset": "coconot", "file": path.relative_to(root).as_posix(), "line": number,
                "coconot_id": coconot_id, "category": record.get("category"),
                "subcategory": record.get("subcategory"), "expected": expected},
    )


COCONOT_HUB = "allenai/coconot"


def _coconot_from_hub(n: int | None, seed: int) -> list[Dialogue]:
    """Refusals: the ``original`` config's train responses (noncompliant by construction); compliant answers:
    the ``pref`` config's ``chosen`` responses."""
    import datasets

    from .fetch import hub_cache_dir

    parts = []
    for config, column, expected in (("original", "response", "abstention"), ("pref", "chosen", "compliant")):
        try:  # the copy `vista data get coconot --source hub` fetched, else a download
            rows = datasets.load_dataset(COCONOT_HUB, config, split="train", cache_dir=str(hub_cache_dir()))
            parts.append((config, column, expected, rows))
        except Exception as exc:
            raise InputError(COCONOT_HUB, f"cannot load config {config!r} from the Hugging Face hub "
                                          f"({type(exc).__name__}: {str(exc)[:200]}); offline, pass the coconot/ "
                                          "directory of the GitHub release instead") from None
    report = LoadReport("coconot", files=[f"{COCONOT_HUB}:{config}" for config, *_ in parts])
    dialogues = []
    root = Path(COCONOT_HUB)
    for config, column, expected, rows in parts:
        name = root / config
        for number, record in enumerate(rows, start=1):
            record = dict(record)
            where = f"{config} row {number}"
            for field_name in ("id", "prompt", column):
                field_value(name, record, field_name, where, str)
            if not record["prompt"].strip() or not record[column].strip():
                report.skip("empty prompt or response", where)
                continue
            dialogue = _coconot_dialogue(name, root, number, record, record[column], expected)
            dialogues.append(dialogue.model_copy(update={"id": f"coconot-{config}-{record['id']}"}))
    return finish(report, root, dialogues, n, seed, side=lambda d: d.source["expected"] == "abstention")


@register("coconot")
def load_coconot(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """CoCoNot directory: GPT-4 refusals of the original eval prompts (expected "abstention") followed by the
    preferred answers to the contrast prompts (expected "compliant"); no reference document."""
    root = Path(path)
    if str(path) in ("hub", COCONOT_HUB):
        return _coconot_from_hub(n, seed)
    if not root.is_dir():
        raise InputError(root, "expected the coconot/ directory (with legacy_commit_3206be6/ and data/), or 'hub' "
                               f"to load {COCONOT_HUB} from the Hugging Face hub (online)")
    report = LoadReport("coconot", files=[COCONOT_REFUSALS, COCONOT_COMPLIANT])
    dialogues = []
    refusals = root / COCONOT_REFUSALS
    for number, record in read_objects(refusals):
        where = f"line {number}"
        for name in ("id", "prompt"):
            field_value(refusals, record, name, where, str)
        refused = field_value(refusals, record, "is_refusal", where, bool)
        response = field_value(refusals, record, "response", where, str, optional=True)
        if not refused:
            report.skip("not a refusal (is_refusal false)", f"{COCONOT_REFUSALS} {where}")
        elif record.get("Faeze_Remove") is True or record.get("Sachin_Remove") is True:
            report.skip("flagged for removal", f"{COCONOT_REFUSALS} {where}")
        elif not record["prompt"].strip():
            report.skip("empty prompt", f"{COCONOT_REFUSALS} {where}")
        elif response is None or not response.strip():
            report.skip("missing response", f"{COCONOT_REFUSALS} {where}")
        else:
            dialogues.append(_coconot_dialogue(refusals, root, number, record, response, "abstention"))
    compliant = root / COCONOT_COMPLIANT
    for number, record in read_objects(compliant):
        where = f"line {number}"
        for name in ("id", "prompt", "chosen"):
            field_value(compliant, record, name, where, str)
        if not record["prompt"].strip():
            report.skip("empty prompt", f"{COCONOT_COMPLIANT} {where}")
        elif not record["chosen"].strip():
            report.skip("missing response", f"{COCONOT_COMPLIANT} {where}")
        else:
            dialogues.append(_coconot_dialogue(compliant, root, number, record, record["chosen"], "compliant"))
    return finish(report, root, dialogues, n, seed, side=lambda d: d.source["expected"] == "abstention")
