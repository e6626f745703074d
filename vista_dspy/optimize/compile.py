"""The one compile (``vista compile --model M``): what a compile costs before any call (``estimate``), the test
part judged once (``judge_test_part``), what a compiled program was fitted on (``fitted_on``, ``check_fitted_on``), and
saving a program with its meta beside it (``save_compiled``). The study that chooses (``study``), its pick within a
budget and its gate against the seed (``study``, ``gate``) are their own modules.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiled.files import programs_dir, write_program
from ..program import Vista
from ..schema import Dialogue
from .gate import ProgramMeta

# ---- compile ---------------------------------------------------------------------------------------------------


@dataclass
class CompileResult:
    """A compiled program, the gate it passed or failed (anything with ``passed``, ``describe`` and ``as_dict``), and
    its meta record (``gate.ProgramMeta``)."""

    program: Vista
    meta: ProgramMeta
    gate: Any

    @property
    def passed(self) -> bool:
        return self.gate.passed


def dialogues_hash(dialogues: Sequence[Dialogue]) -> str:
    """The sha256 of the dialogues' records, in order: what a meta says identifies its data (a program's own hash is
    ``Vista.content_hash``)."""
    digest = hashlib.sha256()
    for dialogue in dialogues:
        digest.update(dialogue.model_dump_json().encode())
    return digest.hexdigest()


def data_record(dialogues: Sequence[Dialogue], describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the meta says of a data set: its description, size and content hash."""
    return {**(describe or {}), "dialogues": len(dialogues), "sha256": dialogues_hash(dialogues),
            "turns": sum(len(d.judged_turns) for d in dialogues),
            "claims": sum(len(d.turns[i].gold.claims or []) for d in dialogues for i in d.judged_turns
                          if d.turns[i].gold is not None)}


# ---- what it was fitted on ---------------------------------------------------------------------------------------
class FittedOnTestPart(ValueError):
    """A fitted artifact saw a dialogue of the suite's test part, which no choice and no fit may see."""


def fitted_on(dialogues: Mapping[str, Sequence[Dialogue]]) -> dict[str, list[str]]:
    """``{dataset: [dialogue ids]}`` of what a fit saw, sorted: the meta's ``fitted_on``."""
    return {name: sorted({d.id for d in found}) for name, found in sorted(dialogues.items()) if found}


def check_fitted_on(meta: Mapping[str, Any], sources: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Raise ``FittedOnTestPart`` naming the first dialogue of a meta's ``fitted_on`` that lies in the suite's test
    part (``data.suite.part_of_group`` of its group id). ``sources``: dialogue id -> the dialogue's ``source`` record,
    for datasets whose rows share a conversation (FADE); without one a dialogue is its own group."""
    from ..data.suite import group_id_of, part_of_group

    for dataset, ids in (meta.get("fitted_on") or {}).items():
        for dialogue_id in ids:
            group = group_id_of(dialogue_id, dict((sources or {}).get(dialogue_id) or {}))
            if part_of_group(group) == "test":
                raise FittedOnTestPart(f"{meta.get('program', 'the program')} was fitted on {dataset} dialogue "
                                       f"{dialogue_id}, which lies in the suite's test part")


# ---- before any call: an estimate ------------------------------------------------------------------------------
# The embedded models' server seconds per judged turn for the seed program, as their priced studies measured them on
# the compile part (benchmarks/fronts/local-1.5b.json and local-0.5b.json, the seed trial): a local compile's time is
# estimated from these, any other server's is unknown until its first trial.
SEED_SECONDS_PER_TURN = {"local": 14.97, "local-0.5b": 8.43}
ESTIMATE_SAMPLE = 3  # dialogues the seed is run on with a stand-in LM to count calls and tokens


@dataclass
class Estimate:
    """What a compile will ask of the model: judged turns, LM calls, prompt and written tokens, and dollars (hosted)
    or server seconds (local), with how each number was found."""

    turns: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    dollars: float | None = None
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        money = (f"${self.dollars:,.2f}" if self.dollars is not None else
                 f"{self.seconds / 3600:,.1f} hours of server time" if self.seconds is not None else
                 "cost unknown before the first trial")
        return [f"estimate: {self.turns:,} judged turns, {self.calls:,} LM calls, {self.prompt_tokens:,} prompt "
                f"tokens, {self.completion_tokens:,} written tokens; {money}", *(f"  {n}" for n in self.notes)]

    def as_dict(self) -> dict[str, Any]:
        return {"turns": self.turns, "calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "dollars": self.dollars, "seconds": self.seconds,
                "notes": self.notes}


def estimate(seed: Vista, compile_dialogues: Sequence[Dialogue], test_dialogues: Sequence[Dialogue], *,
             trials: int, model: str, price_name: str, model_name: str, sample: int = ESTIMATE_SAMPLE,
             anchored: bool = False) -> Estimate:
    """The cost of a compile before any call to the model: the seed run on ``sample`` compile dialogues with a
    stand-in LM (the rule engine, in this process) counts the calls and tokens of a judged turn as the program
    formats them; a compile judges the compile dialogues once per trial and the test dialogues twice (the seed and
    the chosen program; once when the seed's side is read from its recorded anchor: ``anchored``). Dollars from litellm's price map (hosted), server seconds from the embedded model's
    measured seed (local). An upper bound where trials are cheaper than the seed; the demo pool, if a trial reads
    it, adds its own calls (about two per human claim of the compile part)."""
    import dspy

    from ..lm.fake import rule_lm
    from ..run.runner import Threads, evaluate
    from ..schema import UsageCounts

    chosen = list(compile_dialogues[:sample])
    result = evaluate(chosen, seed, Threads(rule_lm(), dspy.JSONAdapter(), 1))
    total = sum((v.usage.total for v in result.verdicts), UsageCounts())
    judged = sum(len(v.turns) for v in result.verdicts) or 1
    test_judges = 1 if anchored else 2
    turns = trials * sum(len(d.judged_turns) for d in compile_dialogues) + test_judges * sum(
        len(d.judged_turns) for d in test_dialogues)
    per_turn = (total.calls / judged, total.prompt_tokens / judged, total.completion_tokens / judged)
    found = Estimate(turns=turns, calls=round(per_turn[0] * turns), prompt_tokens=round(per_turn[1] * turns),
                     completion_tokens=round(per_turn[2] * turns),
                     notes=[f"per judged turn {per_turn[0]:.1f} calls, {per_turn[1]:,.0f} prompt and "
                            f"{per_turn[2]:,.0f} written tokens: the seed's prompts on {len(chosen)} compile "
                            "dialogues, answered by a stand-in (no call to the model)",
                            f"{trials} trials x the compile dialogues, then the test part "
                            + ("once (the chosen; the seed's side from its recorded anchor)" if anchored else
                               "twice (seed and chosen)") + "; a trial cheaper than the seed costs less"])
    if price_name == "dollars":
        from ..lm.offline import offline_litellm

        offline_litellm()
        import litellm

        try:
            prompt, written = litellm.cost_per_token(model=model, prompt_tokens=found.prompt_tokens,
                                                     completion_tokens=found.completion_tokens)
            found.dollars = prompt + written
            found.notes.append(f"dollars from litellm's price map for {model}")
        except Exception:  # litellm raises a bare Exception for a model its map lacks
            found.notes.append(f"litellm's price map has no price for {model}: dollars unknown")
    elif model_name in SEED_SECONDS_PER_TURN:
        found.seconds = SEED_SECONDS_PER_TURN[model_name] * turns
        found.notes.append(f"server time from the seed's measured {SEED_SECONDS_PER_TURN[model_name]} s per judged "
                           f"turn on {model_name}")
    else:
        found.notes.append("this server's time per judged turn is unknown until the first trial measures it")
    return found


# ---- the anchor's record ---------------------------------------------------------------------------------------
ANCHOR_FORMAT = "vista-anchor"


@dataclass(frozen=True)
class Anchor:
    """The seed's judgements of the suite on one model as the instrument recorded them (``compiled/anchors/MODEL.json``,
    written by ``benchmarks/write_anchor.py``): the anchor is fixed, so a compile for that model reads it instead of
    judging the seed again. ``turns``: (dialogue id, turn index) -> (label letter, the turn's raw cost in ``price``)."""

    source: str
    program_sha256: str
    price: str
    turns: Mapping[tuple[str, int], tuple[str, float]]

    def covers(self, data, seed: Vista, price) -> bool:
        """Whether it is the record of this seed, priced alike, with every labelled turn of ``data``."""
        return (self.program_sha256 == seed.content_hash() and self.price == price.name
                and all((did, index) in self.turns for _, did, index, _ in data.turns))


def recorded_anchor(model_name: str, directory: Path | None = None) -> Anchor | None:
    """The shipped anchor record of an embedded model (``program_name_for``), or None."""
    from ..compiled.files import compiled_dir

    path = (directory or compiled_dir() / "anchors") / f"{model_name}.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("format") != ANCHOR_FORMAT:
        return None
    return Anchor(source=record["source"], program_sha256=record["program_sha256"], price=record["price"],
                  turns={(did, index): (letter, cost) for _, did, index, letter, cost in record["turns"]})


# ---- the test part, read once ----------------------------------------------------------------------------------
def judge_test_part(program: Vista, seed: Vista, data, price, *, threads: int = 1, anchor: Anchor | None = None,
                    log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """The chosen program and the seed judged once on the test part (``data``: ``study.ObjectiveData``) with the LM
    of the current dspy context (its cache off: each is priced by its own calls): per dataset and pooled, balanced
    accuracy and turn accuracy of each, and the chosen program's cost. The seed's side is read from ``anchor`` when it
    is the record of this seed with every turn (``Anchor.covers``), and the record says so (``seed_source``). No
    choice reads it; the meta and the card report it, and whether the endpoint's answers carried label probabilities
    (``label_probabilities``; None when no judged side asked the LM about a claim: a program with no LM call)."""
    import dspy

    from ..run.runner import Threads, evaluate
    from .metrics import balanced_accuracy
    from .study import LABEL_LETTERS, measure

    lm = dspy.settings.lm
    fresh = lm.copy(cache=False) if getattr(lm, "cache", False) else lm
    letters: dict[str, str] = {}
    cost: dict[str, float] = {}
    seed_source = "judged by this compile"
    probabilities: bool | None = None
    if anchor is not None and anchor.covers(data, seed, price):
        letters["seed"] = "".join(anchor.turns[(did, index)][0] for _, did, index, _ in data.turns)
        ids = {d.id for d in data.dialogues}
        spent = [c for (did, _), (_, c) in anchor.turns.items() if did in ids]
        cost["seed"] = round(price.per_turn(sum(spent), len(spent)), 6)
        seed_source = f"the anchor's record ({anchor.source}; same program hash), not judged again"
        log(f"test part: the seed's judgements from {anchor.source}")
    for side, judge in (("seed", seed), ("compiled", program)):
        if side in letters:
            continue
        log(f"test part: judging {len(data.dialogues)} dialogues with the {side} program")
        result = evaluate(list(data.dialogues), judge, Threads(fresh, dspy.settings.adapter, threads))
        if result.interrupted:
            raise KeyboardInterrupt
        outcome = measure(data, result.verdicts, price)
        letters[side], cost[side] = outcome.labels, outcome.cost
        asked = [c for v in result.verdicts for t in v.turns for c in t.claims
                 if c.category.value != "ERROR" and c.stage != "evidence"]
        if asked:
            probabilities = bool(probabilities) or any(c.probabilities is not None and c.probabilities.verify
                                                       for c in asked)
    gold = [LABEL_LETTERS[g] for *_, g in data.turns]
    rows: dict[str, dict[str, Any]] = {}
    datasets = ["pooled", *dict.fromkeys(d for d, *_ in data.turns)]
    for name in datasets:
        keep = [i for i, (d, *_) in enumerate(data.turns) if name in ("pooled", d)]
        g = [gold[i] for i in keep]
        rows[name] = {"turns": len(keep), **{
            side: {"balanced_accuracy": round(balanced_accuracy(g, [letters[side][i] for i in keep]), 6),
                   "turn_accuracy": round(sum(letters[side][i] == gold[i] for i in keep) / len(keep), 6)}
            for side in ("seed", "compiled")}}
    return {"data": {k: v for k, v in data.describe().items() if k in ("name", "sha256")} | {
        "dialogues": len(data.dialogues), "turns": len(data.turns)},
        "datasets": rows, "cost": cost, "cost_unit": price.unit, "seed_source": seed_source,
        "label_probabilities": probabilities}


def save_compiled(result: CompileResult, name: str, directory: Path | None = None) -> Path:
    """Write ``<name>.json`` (the program file: demos and instructions, options, decision rule; no LM) and
    ``<name>.meta.json`` into ``directory`` (default: the user's programs folder, ``files.programs_dir``)."""
    directory = directory or programs_dir()
    directory.mkdir(parents=True, exist_ok=True)
    result.program.program_name = name
    path = write_program(result.program.program_file(name), directory / f"{name}.json")
    meta = result.meta.model_copy(update={"program": name, "program_sha256": result.program.content_hash()})
    (directory / f"{name}.meta.json").write_text(json.dumps(meta.model_dump(), indent=2) + "\n")
    return path
