"""Issue 60's premise, with no LM call: on the instrument's compile part, where do the evidence tier's points lie --
in the unit (the turn's sentences, FActScore's atomic facts from the 1.5B, the annotators' own claims), in how its
sources are read (the window of each source that supports the unit, or every word of every source at once), or in
the decision (the shipped rule's evidence model with its turn model, or a plain logistic head over eight cues)?

    python benchmarks/evidence_premise.py [--factscore RUN] [--out benchmarks/premise/evidence-compile.json]

RUN: a `vista benchmark --suite compile --systems factscore --model local --out RUN` folder; its facts are the
"atomic" units (its LM answers are read too: FActScore's own turn labels, and the head with its answers beside the
cues). Only the compile part is read. The plain head is fitted on the annotated claims of the compile part's
vista-human dialogues (five folds by dialogue: a vista-human turn is decided by a head that did not see its
dialogue; the other datasets by the head fitted on all of them); its turn threshold is the one that gives the
annotated compile turns the best balanced accuracy on the units in play (chosen within the same folds). Each
dialogue is judged turn by turn: the units a head decides safe join the knowledge store, as the method does.
Printed and written: balanced accuracy per dataset and pooled with a 95 % interval over dialogues, and, for each
unit, its claim-set F1 against the annotators' claims.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from vista_dspy.compiled.files import read_program
from vista_dspy.data.location import data_dir
from vista_dspy.data.suite import load_suite
from vista_dspy.decision import DecisionRule, decide, turn_flip, unsafe_by_its_figures
from vista_dspy.evidence import SOURCES, Passage, TurnEvidence
from vista_dspy.experiments.bench import suite_paths
from vista_dspy.grounding import clause_units, content_words, sentence_units
from vista_dspy.optimize.metrics import balanced_accuracy, balanced_accuracy_interval, match_claims

PLAIN = ("uncovered_reference", "uncovered_all", "speaker", "opinion", "speaker_opinion", "hedge", "length",
         "question")
UNSAFE = {"LACKING EVIDENCE", "CONTRADICTED"}
SAFE_JOIN = {"VERIFIED", "OUT-OF-SCOPE"}
FOLDS = 5
THRESHOLDS = [t / 20 for t in range(2, 19)]


def all_sources(reference: str | None, knowledge: list[str], history: list[str]) -> TurnEvidence:
    """The reading shipped before issue 60: each source one passage of all its words (its window is all of it)."""
    texts = (reference or "", " ".join(knowledge), " ".join(history))
    passages = tuple(Passage(s, t, frozenset(content_words(t))) for s, t in zip(SOURCES, texts))
    return TurnEvidence(bool(reference and reference.strip()), passages, ((0,) if texts[0] else (),
                                                                           (1,) if texts[1] else (),
                                                                           (2,) if texts[2] else ()))


READINGS = {"passage": lambda r, k, h: TurnEvidence.of(r, k, h), "all-sources": all_sources}


def factscore_units(run: Path) -> dict[tuple[str, int], list[tuple[str, bool]]]:
    """{(dialogue id, turn index): [(fact, supported)]} of a FActScore run over the suite."""
    found: dict[tuple[str, int], list[tuple[str, bool]]] = {}
    for path in run.glob("runs/*/factscore/verdicts.jsonl"):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            verdict = json.loads(line)
            for turn in verdict["turns"]:
                found[(verdict["dialogue_id"], turn["turn_index"])] = [
                    (c["claim"], c["category"] == "VERIFIED") for c in turn["claims"] if c["category"] != "ERROR"]
    return found


def factscore_labels(run: Path) -> dict[tuple[str, int], str]:
    labels = {}
    for path in run.glob("runs/*/factscore/verdicts.jsonl"):
        for line in path.read_text().splitlines():
            if line.strip():
                verdict = json.loads(line)
                for turn in verdict["turns"]:
                    labels[(verdict["dialogue_id"], turn["turn_index"])] = turn["label"]
    return labels


class Turns:
    """The compile part's judged turns, with each unit source."""

    def __init__(self, suite: dict, facts: dict | None):
        self.rows = []  # (dataset, dialogue, index, gold label, {unit kind: [texts]}, {unit kind: [answers]})
        for dataset, dialogues in suite.items():
            for dialogue in dialogues:
                for index in dialogue.judged_turns:
                    turn = dialogue.turns[index]
                    if turn.gold is None or turn.gold.label is None:
                        continue
                    units = {"sentences": sentence_units(turn.text), "clauses": clause_units(turn.text)}
                    answers: dict[str, list] = {}
                    if turn.gold.claims is not None:
                        units["annotated"] = [c.text for c in turn.gold.claims]
                    if facts is not None and (dialogue.id, index) in facts:
                        units["atomic"] = [f for f, _ in facts[(dialogue.id, index)]]
                        answers["atomic"] = [s for _, s in facts[(dialogue.id, index)]]
                    self.rows.append((dataset, dialogue, index, turn.gold.label, units, answers))


def annotated_claims(turns: Turns, reading: str):
    """(cue rows, unsafe labels, dialogue groups) of the annotated claims, the store built from the annotators' own
    safe claims (as ``refit_compile_part.human_turns`` builds it)."""
    x, y, groups = [], [], []
    store: dict[str, list[str]] = defaultdict(list)
    for dataset, dialogue, index, _, _, _ in turns.rows:
        gold = dialogue.turns[index].gold
        if dataset != "vista-human" or gold.claims is None:
            continue
        knowledge = [*dialogue.background, *store[dialogue.id]]
        evidence = READINGS[reading](dialogue.turns[index].grounding.document, knowledge,
                                     [t.text for t in dialogue.turns[:index]])
        for claim in gold.claims:
            x.append(evidence.cues(claim.text))
            y.append(claim.category.value in UNSAFE)
            groups.append(dialogue.id)
        store[dialogue.id].extend(c.text for c in gold.claims if c.category.value in SAFE_JOIN)
    return x, np.array(y), groups


def fold_of(dialogue_id: str) -> int:
    import hashlib

    return hashlib.sha256(dialogue_id.encode()).digest()[1] % FOLDS


class PlainHead:
    """Logistic regression over ``PLAIN`` (and, with ``answers``, FActScore's supported answer), a turn threshold,
    and optionally the checks of VISTA's categories (a factual unit with a figure or a name its passages lack)."""

    def __init__(self, rows, labels, *, checks: bool, answers: bool = False):
        self.names = PLAIN + (("unsupported",) if answers else ())
        self.checks = checks
        self.model = LogisticRegression(max_iter=2000).fit(self.matrix(rows), labels)
        self.threshold = 0.5

    def matrix(self, rows):
        return np.array([[r[n] for n in self.names] for r in rows], dtype=float).reshape(len(rows), len(self.names))

    def p_unsafe(self, rows) -> list[float]:
        return list(self.model.predict_proba(self.matrix(rows))[:, 1]) if rows else []

    def unit_unsafe(self, row, p) -> bool:
        return p >= self.threshold or (self.checks and unsafe_by_its_figures(row))


def judge_dialogue(dialogue, indices, units_of, answers_of, reading, decide_units):
    """{turn index: hallucinated?} for the judged turns ``indices`` of one dialogue, turn by turn, the units decided
    safe joining the store."""
    store: list[str] = []
    out = {}
    for index in indices:
        units = units_of(index)
        evidence = READINGS[reading](dialogue.turns[index].grounding.document, [*dialogue.background, *store],
                                     [t.text for t in dialogue.turns[:index]])
        rows = [evidence.cues(u) for u in units]
        for row, answer in zip(rows, answers_of(index) or [None] * len(rows)):
            if answer is not None:
                row["unsupported"] = float(not answer)
        unsafe = decide_units(rows)
        out[index] = any(unsafe)
        store.extend(u for u, bad in zip(units, unsafe) if not bad)
    return out


def evaluate(turns: Turns, unit: str, reading: str, head: str, shipped_rule, answers: bool = False):
    """{(dialogue id, index): (dataset, gold, predicted)} over the turns that have ``unit`` units."""
    by_dialogue: dict[str, list] = defaultdict(list)
    for row in turns.rows:
        if unit in row[4]:
            by_dialogue[row[1].id].append(row)
    if head in ("shipped", "evidence.json"):
        shipped_rule = shipped_rule if head == "shipped" else DecisionRule.model_validate(
            read_program("evidence").rule).evidence_only()

        def decide_units_for(_dialogue_id):
            def decide_units(rows):
                decisions = [decide(shipped_rule, r) for r in rows]
                categories = [d.category.value for d in decisions]
                flip = turn_flip(shipped_rule, [d.p_unsafe for d in decisions], categories)
                if flip is not None:
                    categories[flip.index] = "LACKING EVIDENCE"
                return [c in UNSAFE for c in categories]
            return decide_units
    else:
        x, y, groups = annotated_claims(turns, reading)
        if answers:  # the head with FActScore's answers is fitted on the atomic units matched to annotated claims
            x, y, groups = matched_atomic_rows(turns, reading)
        checks = head == "plain+checks"
        heads = {}
        for fold in [*range(FOLDS), None]:
            keep = [i for i, g in enumerate(groups) if fold is None or fold_of(g) != fold]
            heads[fold] = PlainHead([x[i] for i in keep], y[keep], checks=checks, answers=answers)
        # The threshold: the best balanced accuracy on the annotated compile turns, each decided by its fold's head.
        human = [(d, rows) for d, rows in by_dialogue.items() if rows[0][0] == "vista-human"]
        scores = {}
        for t in THRESHOLDS:
            gold, pred = [], []
            for dialogue_id, rows in human:
                h = heads[fold_of(dialogue_id)]
                h.threshold = t
                got = judge_dialogue(rows[0][1], [r[2] for r in rows], lambda i, rows=rows: _units(rows, i, unit),
                                     lambda i, rows=rows: _answers(rows, i, unit), reading,
                                     lambda rs, h=h: [h.unit_unsafe(r, p) for r, p in zip(rs, h.p_unsafe(rs))])
                for r in rows:
                    gold.append(r[3])
                    pred.append("hallucinated" if got[r[2]] else "faithful")
            scores[t] = balanced_accuracy(gold, pred)
        best = max(THRESHOLDS, key=lambda t: (scores[t], -abs(t - 0.5)))
        for h in heads.values():
            h.threshold = best

        def decide_units_for(dialogue_id):
            h = heads[fold_of(dialogue_id) if by_dialogue[dialogue_id][0][0] == "vista-human" else None]
            return lambda rs: [h.unit_unsafe(r, p) for r, p in zip(rs, h.p_unsafe(rs))]
    out = {}
    for dialogue_id, rows in by_dialogue.items():
        got = judge_dialogue(rows[0][1], [r[2] for r in rows], lambda i, rows=rows: _units(rows, i, unit),
                             lambda i, rows=rows: _answers(rows, i, unit), reading, decide_units_for(dialogue_id))
        for r in rows:
            out[(dialogue_id, r[2])] = (r[0], r[3], "hallucinated" if got[r[2]] else "faithful")
    return out, (best if head not in ("shipped", "evidence.json") else None)


def matched_atomic_rows(turns: Turns, reading: str):
    """The atomic units matched one-to-one to an annotated claim, labelled by it, with FActScore's answer as a cue."""
    x, y, groups = [], [], []
    for dataset, dialogue, index, _, units, answers in turns.rows:
        if dataset != "vista-human" or "atomic" not in units or "annotated" not in units:
            continue
        gold = dialogue.turns[index].gold.claims
        evidence = READINGS[reading](dialogue.turns[index].grounding.document, list(dialogue.background),
                                     [t.text for t in dialogue.turns[:index]])
        match = match_claims(units["atomic"], units["annotated"])
        for e, g, _ in match.pairs:
            row = evidence.cues(units["atomic"][e])
            row["unsupported"] = float(not answers["atomic"][e])
            x.append(row)
            y.append(gold[g].category.value in UNSAFE)
            groups.append(dialogue.id)
    return x, np.array(y), groups


def _units(rows, index, unit):
    return next(r[4][unit] for r in rows if r[2] == index)


def _answers(rows, index, unit):
    return next((r[5].get(unit) for r in rows if r[2] == index), None)


def table(results: dict) -> dict:
    """Balanced accuracy per dataset and pooled (with its interval over dialogues)."""
    by = defaultdict(lambda: ([], [], []))
    for (dialogue_id, _), (dataset, gold, pred) in results.items():
        for key in (dataset, "pooled"):
            by[key][0].append(gold)
            by[key][1].append(pred)
            by[key][2].append(dialogue_id)
    out = {}
    for key, (gold, pred, groups) in sorted(by.items()):
        low, high = balanced_accuracy_interval(gold, pred, groups) if key == "pooled" else (None, None)
        out[key] = {"turns": len(gold), "balanced_accuracy": round(balanced_accuracy(gold, pred), 4),
                    **({"interval": [round(low, 4), round(high, 4)]} if low is not None else {})}
    return out


def claim_f1(turns: Turns, unit: str) -> dict:
    matched = total = n = count = 0
    for dataset, _, _, _, units, _ in turns.rows:
        if dataset == "vista-human" and unit in units and "annotated" in units:
            match = match_claims(units[unit], units["annotated"])
            matched += len(match.pairs)
            total += match.extracted + match.gold
            n += 1
            count += len(units[unit])
    return {"turns": n, "claim_set_f1": round(2 * matched / total, 4) if total else None,
            "units_per_turn": round(count / n, 2) if n else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--factscore", type=Path, help="a FActScore run over the suite's compile part")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    suite = load_suite(suite_paths(data_dir()), "compile")
    facts = factscore_units(args.factscore) if args.factscore else None
    turns = Turns(suite, facts)
    shipped = read_program("local").rule
    shipped_rule = DecisionRule.model_validate(shipped).evidence_only()
    results = {"command": "python benchmarks/evidence_premise.py" + (" --factscore RUN" if args.factscore else "")
               + (f" --out {args.out}" if args.out else ""),
               "run": ("RUN: vista benchmark --suite compile --datasets begin,vista-human --systems factscore --model "
                       "local --out RUN (the 1.5B's atomic facts; begin partly: 58 of 103 turns)") if args.factscore
               else None, "part": "compile", "rows": [], "units": {}}
    for unit in ("sentences", "clauses", "atomic", "annotated"):
        if not any(unit in r[4] for r in turns.rows):
            continue
        results["units"][unit] = claim_f1(turns, unit)
        for reading in READINGS:
            for head in ("shipped", "evidence.json", "plain", "plain+checks"):
                got, threshold = evaluate(turns, unit, reading, head, shipped_rule)
                row = {"unit": unit, "reading": reading, "decision": head, "threshold": threshold, **table(got)}
                results["rows"].append(row)
                print(_line(row), flush=True)
            if unit == "atomic":
                got, threshold = evaluate(turns, unit, reading, "plain+checks", shipped_rule, answers=True)
                row = {"unit": unit, "reading": reading, "decision": "plain+checks+factscore-answer",
                       "threshold": threshold, **table(got)}
                results["rows"].append(row)
                print(_line(row), flush=True)
    if facts is not None:
        labels = factscore_labels(args.factscore)
        got = {(d.id, i): (ds, g, labels[(d.id, i)]) for ds, d, i, g, u, _ in turns.rows if (d.id, i) in labels}
        row = {"unit": "atomic", "reading": "-", "decision": "FActScore's own labels (LM)", "threshold": None,
               **table(got)}
        results["rows"].append(row)
        print(_line(row))
    for unit, f1 in results["units"].items():
        print(f"{unit}: claim-set F1 against the annotated claims {f1['claim_set_f1']} over {f1['turns']} turns, "
              f"{f1['units_per_turn']} units per turn")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _line(row: dict) -> str:
    datasets = " ".join(f"{k} {v['balanced_accuracy']:.3f}" for k, v in row.items()
                        if isinstance(v, dict) and k != "pooled")
    pooled = row["pooled"]
    return (f"{row['unit']:9} {row['reading']:11} {row['decision']:32} pooled {pooled['balanced_accuracy']:.3f} "
            f"[{pooled['interval'][0]:.3f}, {pooled['interval'][1]:.3f}] ({pooled['turns']} turns) | {datasets}"
            + (f" | t={row['threshold']}" if row["threshold"] is not None else ""))


if __name__ == "__main__":
    raise SystemExit(main())
