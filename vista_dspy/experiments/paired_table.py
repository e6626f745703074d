"""Decisions paired against a base on the same turns and the same matched claims, as one Markdown table: the rows of
``vista benchmark --systems vista,seed`` (programs judged end to end, ``decisions_of`` their verdicts). Arithmetic over ``TurnDecision`` records: no LM call.

Claim columns are on the decomposed claims that carry an annotators' judgement (``judged_turns.label_claims``; a
sentence added by coverage aside); paired tests against the base: exact McNemar on those claims and on the turns;
the interval resamples dialogues (``recipes.turn_difference_interval``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..optimize.demos import claim_scores
from ..optimize.gate import PairedTest
from ..optimize.rules.judged_turns import turns_of
from ..optimize.rules.recipes import by_claim_count, paired_claims, paired_turns, turn_difference_interval
from ..optimize.rules.rule_fitting import TurnDecision, scores
from ..schema import Dialogue, DialogueVerdict

HEADER = ("| decisions | turn acc. | false alarms / misses | P / R / F1 (hallucinated) | claim decisions | "
          "five-way acc. / macro-F1 | contradicted -> verified | LM calls / turn | vs {base}: turns (95% interval) "
          "| vs {base}: claims |")


def decisions_of(verdicts: Iterable[DialogueVerdict], dialogues: Mapping[str, Dialogue]) -> list[TurnDecision]:
    """The verdicts' own decisions (each claim's category, each turn's label, as judged) over their judged turns,
    the decomposed claims labelled by the annotators' claims of ``dialogues`` (``judged_turns.turns_of``)."""
    verdicts = list(verdicts)
    rows = iter(turns_of(verdicts, dialogues))
    return [TurnDecision(next(rows), [c.category.value for c in turn.claims], [c.p_unsafe for c in turn.claims],
                         [c.decided_by == "evidence" for c in turn.claims], turn.label)
            for verdict in verdicts for turn in verdict.turns]


def matched_claim_scores(decided: Sequence[TurnDecision]) -> dict[str, Any]:
    """Claim scores on the decomposed claims that carry an annotators' judgement (coverage's sentences aside)."""
    pairs = [(c, r.gold) for d in decided for c, r in zip(d.categories, d.turn.rows)
             if r.gold is not None and r.cues.get("coverage", 0.0) == 0.0]
    return claim_scores([c for c, _ in pairs], [g for _, g in pairs])


def contradicted_called_verified(decided: Sequence[TurnDecision]) -> int:
    """Claims the judge was asked about and found CONTRADICTED that the row calls VERIFIED (a claim the cascade
    decided by its evidence alone is never asked, so it has no judge's label to go against)."""
    return sum(c == "VERIFIED" and r.judge == "CONTRADICTED" and not alone
               for d in decided for c, r, alone in zip(d.categories, d.turn.rows, d.by_evidence))


def paired_numbers(rows: Mapping[str, Sequence[TurnDecision]], base: str) -> dict[str, dict[str, Any]]:
    """Every number of each row, the paired tests and the turn interval against ``rows[base]``."""
    reference = rows[base]
    out = {}
    for name, decided in rows.items():
        s = scores(decided)
        turns, claims = paired_turns(decided, reference), paired_claims(decided, reference)
        out[name] = {**s, "matched_claims": matched_claim_scores(decided),
                     "contradicted_called_verified": contradicted_called_verified(decided),
                     "by_claim_count": by_claim_count(decided),
                     "turn_difference": turn_difference_interval(decided, reference) if turns[0] else None,
                     "vs_base": {"turns": PairedTest.of(*turns).model_dump() if turns[0] else None,
                                 "claims": PairedTest.of(*claims).model_dump() if claims[0] else None}}
    return out


def _versus(test: Mapping[str, Any] | None, digits: int) -> str:
    return "-" if test is None else (f"+{test['candidate_only']} / −{test['base_only']}, p = "
                                     f"{test['pvalue']:.{digits}f}")


def paired_markdown(numbers: Mapping[str, Mapping[str, Any]], base: str) -> list[str]:
    """``paired_numbers`` as a Markdown table, a row per decision."""
    header = HEADER.format(base=base)
    lines = [header, "|---" * (header.count("|") - 1) + "|"]
    for name, n in numbers.items():
        claims, interval = n["matched_claims"], n["turn_difference"]
        difference = "" if interval is None else (f"{interval['difference']:+.3f} ({interval['low']:+.3f} to "
                                                   f"{interval['high']:+.3f}), ")
        lines.append(
            f"| {name} | {n['accuracy']:.3f} | {n['false_alarms']} / {n['misses']} | {n['precision']:.2f} / "
            f"{n['recall']:.2f} / {n['f1']:.2f} | {claims.get('decision_accuracy', 0):.3f} | "
            f"{claims.get('accuracy', 0):.3f} / {claims.get('macro_f1', 0):.3f} | "
            f"{n['contradicted_called_verified']} | {n['calls_per_turn']:.2f} | "
            f"{difference}{_versus(n['vs_base']['turns'], 3)} | {_versus(n['vs_base']['claims'], 4)} |")
    return lines


__all__ = ["contradicted_called_verified", "decisions_of", "matched_claim_scores", "paired_markdown",
           "paired_numbers"]
