"""The gate: what a compiled program must pass to replace the seed, and the record it carries beside it.

**The anchored gate** (DESIGN.md, wave 7): a candidate is compared with the seed program -- the paper's method -- on
the same turns, paired, never with the previous default (margins must not chain). It passes when its balanced
accuracy is not below the seed's by more than ``GATE_MARGIN`` (1 point) with one-sided confidence ``1 - GATE_ALPHA``
(the lower bound of the paired bootstrap difference over dialogues is at least -margin); it *wins* only when that
bound is above zero. Turn accuracy's exact McNemar test is reported beside it. One rule, two readings of the same
decisions: ``seed_gate`` on a study's recorded letters (``vista compile``, ``vista study``: turns, and claims not
significantly worse), ``anchored_gate`` on the suite runs' turns (``vista gate``: per dataset, with the turns the
LM flipped against the tier with no LM call). Arithmetic over recorded decisions: no LM call.

The same rule gates a decision rule fitted on a recorded probe (``rules.recipes.probe_gate``: its decisions against the
seed's recorded ones on the same turns). Also here: ``PairedTest`` (two programs on the same items, exact McNemar, for
the tables), ``ProgramMeta`` (``<name>.meta.json``), and the instrument's arithmetic the anchored gate reads
(``turn_scores``, ``paired_frame``, ``system_table``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from .metrics import balanced_accuracy, balanced_accuracy_difference, balanced_accuracy_interval, mcnemar_exact

if TYPE_CHECKING:
    import pandas as pd

META_VERSION = 1
GATE_MARGIN = 0.01  # the anchored gate: balanced accuracy within 1 point of the seed's
GATE_ALPHA = 0.05
MARGIN = GATE_MARGIN
CONFIDENCE = 1 - GATE_ALPHA


# ---- the anchored gate on a study's letters ---------------------------------------------------------------------
class SeedGate(BaseModel):
    """A candidate against the seed: turns (non-inferiority) and, where there are any, claims (not significantly
    worse)."""

    model_config = ConfigDict(frozen=True)

    candidate: str
    seed: str = "seed"
    margin: float = MARGIN
    confidence: float = CONFIDENCE
    turns: dict[str, Any]  # difference, low (one-sided), candidate / seed balanced accuracy, turns, dialogues
    claims: dict[str, Any] | None = None  # difference, high (one-sided), claims

    @property
    def turns_non_inferior(self) -> bool:
        return self.turns["low"] >= -self.margin

    @property
    def claims_not_worse(self) -> bool:
        return self.claims is None or self.claims["high"] >= 0

    @property
    def passed(self) -> bool:
        return self.turns_non_inferior and self.claims_not_worse

    @property
    def wins(self) -> bool:
        """Significantly better turns than the seed (the lower bound above 0)."""
        return self.turns["low"] > 0

    def describe(self) -> list[str]:
        """One line per test, then the verdict."""
        t = self.turns
        lines = [f"turns: {self.candidate} balanced accuracy {t['candidate']:.3f}, {self.seed} {t['seed']:.3f} on "
                 f"the same {t['turns']} turns of {t['dialogues']} dialogues; difference {t['difference']:+.3f}, "
                 f"one-sided {self.confidence:.0%} lower bound {t['low']:+.3f} (non-inferior if at least "
                 f"{-self.margin:+.3f})"]
        if self.claims is None:
            lines.append("claim decisions: not compared (no claims both decided in two dialogues or more)")
        else:
            c = self.claims
            lines.append(f"claim decisions: balanced accuracy {c['candidate']:.3f} vs {c['seed']:.3f} on the "
                         f"{c['claims']} claims both decided; difference {c['difference']:+.3f}, one-sided "
                         f"{self.confidence:.0%} upper bound {c['high']:+.3f} (not significantly worse if at least 0)")
        verdict = "passed" if self.passed else "failed"
        why = [] if self.passed else [w for ok, w in ((self.turns_non_inferior, "its turns lose to the seed's"),
                                                      (self.claims_not_worse, "its claim decisions are significantly "
                                                                              "worse")) if not ok]
        lines.append(f"gate against the {self.seed} (paired bootstrap over dialogues): {verdict}"
                     + (f" ({'; '.join(why)})" if why else "")
                     + ("; a significant win on turns" if self.wins else ""))
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {**self.model_dump(), "passed": self.passed, "wins": self.wins}


def seed_gate(turns: Sequence[tuple[str, str]], candidate: str, seed: str, *,
              candidate_claims: Mapping[str, str] | None = None, seed_claims: Mapping[str, str] | None = None,
              name: str = "candidate", seed_name: str = "seed", margin: float = MARGIN,
              confidence: float = CONFIDENCE, bootstrap_seed: int = 0) -> SeedGate:
    """The gate of ``candidate`` against ``seed``. ``turns``: (dialogue id, gold letter) per turn; ``candidate`` and
    ``seed``: one predicted letter per turn, in that order (a letter other than the gold's is wrong, unknown
    included). Claims: {claim key "dialogue#turn#hash": gold letter + decision letter}, paired on the keys both
    hold with the same gold."""
    if not turns or len(candidate) != len(turns) or len(seed) != len(turns):
        raise ValueError("the candidate and the seed were not judged on the same turns")
    groups, gold = [d for d, _ in turns], [g for _, g in turns]
    difference = balanced_accuracy_difference(gold, list(candidate), list(seed), groups, confidence=confidence,
                                              alternative="greater", seed=bootstrap_seed)
    turn_record = {"difference": round(difference["difference"], 6), "low": round(difference["low"], 6),
                   "candidate": round(balanced_accuracy(gold, list(candidate)), 6),
                   "seed": round(balanced_accuracy(gold, list(seed)), 6), "turns": len(turns),
                   "dialogues": len(set(groups))}
    claims = None
    theirs_by_key = seed_claims or {}
    common = [k for k, v in (candidate_claims or {}).items() if k in theirs_by_key and theirs_by_key[k][0] == v[0]]
    # Claims are compared only over two dialogues or more: one cannot be resampled (units judged as sentences share
    # few claim keys with the seed's decomposed claims).
    if len({k.split("#", 1)[0] for k in common}) >= 2:
        claim_gold = [candidate_claims[k][0] for k in common]
        mine, theirs = [candidate_claims[k][1] for k in common], [seed_claims[k][1] for k in common]
        c = balanced_accuracy_difference(claim_gold, mine, theirs, [k.split("#", 1)[0] for k in common],
                                         confidence=confidence, alternative="less", seed=bootstrap_seed)
        claims = {"difference": round(c["difference"], 6), "high": round(c["high"], 6),
                  "candidate": round(balanced_accuracy(claim_gold, mine), 6),
                  "seed": round(balanced_accuracy(claim_gold, theirs), 6), "claims": len(common)}
    return SeedGate(candidate=name, seed=seed_name, margin=margin, confidence=confidence, turns=turn_record,
                    claims=claims)


# ---- the anchored gate on suite runs ------------------------------------------------------------------------------
def turn_scores(frame: pd.DataFrame) -> dict[str, Any]:
    """Balanced accuracy beside ``scoring.turn_metrics`` (accuracy, unknown turns, P/R/F1 of the hallucinated class,
    an unknown counted wrong) of one system's turns (columns ``gold``, ``label``)."""
    from ..scoring import turn_metrics

    gold, label = list(frame["gold"]), list(frame["label"])
    if not gold:
        return {"turns": 0, "balanced_accuracy": None}
    m = turn_metrics(label, gold)
    return {"turns": m["turns"], "balanced_accuracy": balanced_accuracy(gold, label), "accuracy": m["accuracy"],
            "unknown": m["unknown"], "precision_h": m["precision_hallucinated"], "recall_h": m["recall_hallucinated"],
            "f1_h": m["f1_hallucinated"], "hallucinated_share": m["always_hallucinated_accuracy"]}


def _groups(frame: pd.DataFrame) -> list[str]:
    return [f"{d}:{i}" for d, i in zip(frame["dataset"], frame["dialogue_id"])]


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["dataset", "dialogue_id", "turn_index"])


def paired_frame(turns: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """The turns every one of ``systems`` judged (inner join on dataset, dialogue and turn), long form again."""
    keys = ["dataset", "dialogue_id", "turn_index"]
    common = None
    for system in systems:
        mine = turns.loc[turns["system"] == system, keys]
        common = mine if common is None else common.merge(mine, on=keys)
    if common is None or common.empty:
        return turns.iloc[0:0]
    return turns[turns["system"].isin(systems)].merge(common, on=keys)


def system_table(turns: pd.DataFrame, systems: Sequence[str], *, by_dataset: bool = True) -> pd.DataFrame:
    """Rows (dataset or 'pooled') x system on the turns all ``systems`` judged: the scores of ``turn_scores`` and
    a 95 % interval of balanced accuracy (dialogues resampled)."""
    import pandas as pd

    paired = paired_frame(turns, systems)
    rows = []
    groups = [("pooled", paired)] + (list(paired.groupby("dataset", sort=False)) if by_dataset else [])
    for name, group in groups:
        for system in systems:
            mine = _ordered(group[group["system"] == system])
            low, high = balanced_accuracy_interval(list(mine["gold"]), list(mine["label"]), _groups(mine))
            rows.append({"dataset": name, "system": system, **turn_scores(mine), "ba_low": low, "ba_high": high})
    return pd.DataFrame(rows)


def anchored_gate(turns: pd.DataFrame, candidate: str, anchor: str = "seed", *, margin: float = GATE_MARGIN,
                  alpha: float = GATE_ALPHA, no_lm: str | None = None) -> dict[str, Any]:
    """The candidate against the anchor on the turns both judged (pooled over the suite's datasets, and per dataset
    for reading): the paired difference of balanced accuracy, its one-sided ``1 - alpha`` lower bound, whether it
    passes (lower bound > -margin) and whether it wins (lower bound > 0); turn accuracy's exact McNemar test; and,
    with ``no_lm`` (the tier with no LM call on the same turns), the turn labels the candidate's LM flipped against
    it: how many, and how many of those it got right."""
    systems = [candidate, anchor] + ([no_lm] if no_lm else [])
    paired = paired_frame(turns, systems)
    if paired.empty:
        raise ValueError(f"no turn judged by all of {', '.join(systems)}")
    datasets: dict[str, Any] = {}
    for name, group in [("pooled", paired)] + list(paired.groupby("dataset", sort=False)):
        mine, theirs = (_ordered(group[group["system"] == s]) for s in (candidate, anchor))
        gold, groups = list(mine["gold"]), _groups(mine)
        one_sided = balanced_accuracy_difference(gold, list(mine["label"]), list(theirs["label"]), groups,
                                                 confidence=1 - alpha, alternative="greater")
        two_sided = balanced_accuracy_difference(gold, list(mine["label"]), list(theirs["label"]), groups,
                                                 alternative="two-sided")
        a, b = turn_scores(mine), turn_scores(theirs)
        test = mcnemar_exact(gold, list(mine["label"]), list(theirs["label"]))
        datasets[name] = {
            "turns": a["turns"], "candidate": a, "anchor": b, "difference": one_sided["difference"],
            "lower_bound": one_sided["low"], "interval_95": (two_sided["low"], two_sided["high"]),
            "turns_only_candidate_right": test["a_only"], "turns_only_anchor_right": test["b_only"],
            "mcnemar_p": float(test["pvalue"]),
        }
    pooled = datasets["pooled"]
    record: dict[str, Any] = {
        "candidate": candidate, "anchor": anchor, "margin": margin, "alpha": alpha,
        "passes": pooled["lower_bound"] >= -margin, "wins": pooled["lower_bound"] > 0, "datasets": datasets,
        "rule": f"passes: the {alpha:.0%} quantile of the paired bootstrap difference of balanced accuracy "
                f"(candidate - {anchor}, dialogues resampled) is at least -{margin:.2f}; wins: above 0",
    }
    if no_lm:
        mine, tier = (_ordered(paired[paired["system"] == s]) for s in (candidate, no_lm))
        flipped = mine["label"].to_numpy() != tier["label"].to_numpy()
        right = mine["label"].to_numpy() == mine["gold"].to_numpy()
        record["lm_flips"] = {"against": no_lm, "turns": int(flipped.sum()),
                              "now_right": int((flipped & right).sum()), "now_wrong": int((flipped & ~right).sum())}
    return record


def gate_markdown(record: dict[str, Any]) -> list[str]:
    """The anchored gate's table: a row per dataset and pooled."""
    anchor, candidate = record["anchor"], record["candidate"]
    lines = [f"| turns of | turns | {anchor} bal. acc. | {candidate} bal. acc. | difference "
             f"(95 % interval) | one-sided {1 - record['alpha']:.0%} lower bound | turn acc. {anchor} / "
             f"{candidate} | only {candidate} / only {anchor} right (McNemar p) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, d in record["datasets"].items():
        c, a = d["candidate"], d["anchor"]
        lines.append(f"| {name} | {d['turns']} | {a['balanced_accuracy']:.3f} | {c['balanced_accuracy']:.3f} | "
                     f"{d['difference']:+.3f} ({d['interval_95'][0]:+.3f} to {d['interval_95'][1]:+.3f}) | "
                     f"{d['lower_bound']:+.3f} | {a['accuracy']:.3f} / {c['accuracy']:.3f} | "
                     f"{d['turns_only_candidate_right']} / {d['turns_only_anchor_right']} ({d['mcnemar_p']:.3f}) |")
    verdict = ("wins against" if record["wins"] else "passes against" if record["passes"] else "fails against")
    lines.append("")
    lines.append(f"{candidate} {verdict} {anchor} ({record['rule']}).")
    if "lm_flips" in record:
        f = record["lm_flips"]
        lines.append(f"Turn labels its LM changed against `{f['against']}` (no LM call) on the same turns: "
                     f"{f['turns']} ({f['now_right']} now right, {f['now_wrong']} now wrong).")
    return lines


# ---- paired tests and the meta record ----------------------------------------------------------------------------
class PairedTest(BaseModel):
    """Two programs on the same items: how many only the candidate got right, only the base, and the exact
    McNemar p-value of that split."""

    model_config = ConfigDict(frozen=True)

    items: int
    candidate_right: int
    base_right: int
    candidate_only: int
    base_only: int
    pvalue: float

    @classmethod
    def of(cls, candidate: Sequence[bool], base: Sequence[bool]) -> PairedTest:
        if not candidate or len(candidate) != len(base):
            raise ValueError("the two programs were not scored on the same items")
        test = mcnemar_exact([True] * len(candidate), list(candidate), list(base))
        return cls(items=len(candidate), candidate_right=sum(candidate), base_right=sum(base),
                   candidate_only=test["a_only"], base_only=test["b_only"], pvalue=float(test["pvalue"]))

    def describe(self, what: str, candidate: str = "compiled", base: str = "base") -> str:
        return (f"{what}: {candidate} {self.candidate_right}/{self.items} right, {base} {self.base_right}/"
                f"{self.items}; right only with the {candidate} {self.candidate_only}, only with the {base} "
                f"{self.base_only}; exact McNemar p = {self.pvalue:.3f}")


class ProgramMeta(BaseModel):
    """``<name>.meta.json``: how a program was compiled (``vista compile``, or ``--budget`` from a study), on which
    data (content hashes), how it and its base scored on data no choice saw, the gate, and the cost."""

    model_config = ConfigDict(extra="forbid")

    meta_version: int = META_VERSION
    program: str
    program_sha256: str | None = None  # the content hash of the program this meta describes (``compiled``)
    model: str | None = None
    model_name: str | None = None
    optimizer: str
    settings: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict)
    dev: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, Any] = Field(default_factory=dict)  # base and compiled, on the data choices were made on
    gate: dict[str, Any] = Field(default_factory=dict)  # SeedGate.as_dict(): the gate against the seed
    # The instrument's gate (``instrument.anchored_gate``): against the seed on the suite's compile part.
    anchored_gate: dict[str, Any] | None = None
    choice: dict[str, Any] = Field(default_factory=dict)  # the numbers each choice was made with
    # {dataset: [dialogue ids]} every fitted part of the program saw (its demos' pool, its rule): never the suite's
    # test part (``compile.check_fitted_on``)
    fitted_on: dict[str, list[str]] | None = None
    # The test part judged once, the chosen program and the seed (``compile.judge_test_part``)
    test_part: dict[str, Any] | None = None
    options: dict[str, Any] = Field(default_factory=dict)  # the judging options saved with the program
    rule: dict[str, Any] | None = None  # the decision rule saved with the program (DecisionRule)
    demos: dict[str, int] = Field(default_factory=dict)
    cost: dict[str, Any] = Field(default_factory=dict)  # LM calls and tokens, seconds
    dspy_version: str = ""
    date: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    note: str | None = None


def write_anchored_gate(meta: Path, record: dict[str, Any]) -> None:
    """Write the instrument's gate (``instrument.anchored_gate``'s record) into a program's meta file as
    ``anchored_gate``; a meta that cannot be read raises ValueError naming the file."""
    try:
        document = ProgramMeta.model_validate_json(meta.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{meta}: cannot read the program meta ({exc})") from None
    meta.write_text(document.model_copy(update={"anchored_gate": record}).model_dump_json(indent=2) + "\n")
