"""Issue 49's premise on the instrument: can closed yes/no questions to the embedded model, read as P(yes) from the
log-probabilities of a one-token answer, move turn labels beyond what the evidence cues alone decide?

For every sentence unit of the suite's turns (one part; the units the no-LM probe ``suite-no-lm`` decided, in the
same order), three questions go to the embedded server, one token each:

- ``support_all``: the turn's sources whole (its reference document, the dialogue's background and every earlier turn)
  -- "Do the sources support the statement?";
- ``support_top``: the same question over only the source passages that bear on the unit: the sources' sentences
  ranked by BM25 against the unit (``rank_bm25``), the best ones within ``--words`` words (the evidence budget);
- ``fact``: no passage -- "Is the statement a claim about the world that a source could confirm or refute, rather
  than the speaker's own feeling, experience, opinion, plan, question or greeting?"

The answers are appended to ``OUT/answers.jsonl`` as they come (a rerun asks only what is missing). Then, with no LM,
turn rules are fitted two-fold (folds by the suite's dialogue group) on the chosen part: a balanced logistic
regression over the turn's aggregates of the no-LM tier's unit probability (``p_unsafe``) alone, and with each
question's answers beside it. The table reports each beside the seed, the shipped default and the shipped no-LM tier
on the same turns (``instrument.system_table``), and gates each against the seed (``instrument.anchored_gate``,
with its turn flips against the no-LM tier), plus each question's cost per unit in prompt tokens and server time.

    python benchmarks/closed_questions.py --part compile --out RUN [--limit N]   # asks, then prints the tables
    python benchmarks/closed_questions.py --part compile --out RUN --no-ask      # the tables from RUN alone

Needs the ``[bench]`` and ``[local]`` extras; it starts the embedded server, or reuses one on the port. The compile
part's answers (ids and probabilities, no dataset text) are committed in ``benchmarks/probes/closed-questions-compile``:
``--out benchmarks/probes/closed-questions-compile --no-ask`` rebuilds its tables.
Fit and choose only on the compile part: the test part is read once, to report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
from scipy.special import logit as scipy_logit

from vista_dspy.data.location import data_dir
from vista_dspy.data.records import read_jsonl_records
from vista_dspy.data.suite import group_id, load_suite
from vista_dspy.experiments.bench import suite_paths
from vista_dspy.experiments.instrument import probe_turns
from vista_dspy.grounding import content_words, sentence_units, split_sentences
from vista_dspy.optimize.instrument import anchored_gate, system_table
from vista_dspy.optimize.metrics import recall_mean
from vista_dspy.scoring import UNSAFE_CATEGORIES

PROBES = Path(__file__).parent / "probes"
SYSTEM = "You answer a question about a statement with one word: yes or no."
SUPPORT = "Sources:\n{passage}\n\nStatement: {unit}\n\nQuestion: Do the sources support the statement?"
FACT = ("Statement: {unit}\n\nQuestion: Is the statement a claim about the world that a source could confirm or "
        "refute, rather than the speaker's own feeling, experience, opinion, plan, question or greeting?")
QUESTIONS = ("support_all", "support_top", "fact")
NO_LM_THRESHOLD = 0.2  # the shipped evidence model's (compiled/local.json)
WEIGHTS = np.arange(0.0, 3.01, 0.25)


def sources_of(dialogue, index: int) -> list[str]:
    """The passages a unit of turn ``index`` may be checked against: the reference document's sentences, the
    background, and the sentences of every earlier turn (what VISTA's knowledge store accumulates)."""
    turn = dialogue.turns[index]
    passages = split_sentences(turn.grounding.document) if turn.grounding and turn.grounding.document else []
    passages += list(dialogue.background)
    for earlier in dialogue.turns[:index]:
        passages += split_sentences(earlier.text)
    return [p for p in passages if p.strip()]


def top_passages(passages: list[str], unit: str, words: int) -> list[str]:
    """The passages BM25 ranks highest for ``unit`` (content stems as terms), kept in source order, within ``words``."""
    from rank_bm25 import BM25Okapi

    if not passages:
        return []
    terms = [sorted(content_words(p)) or ["_"] for p in passages]
    scores = BM25Okapi(terms).get_scores(sorted(content_words(unit)))
    chosen, used = [], 0
    for i in np.argsort(-scores, kind="stable"):
        size = len(passages[i].split())
        if chosen and used + size > words:
            break
        chosen.append(int(i))
        used += size
    return [passages[i] for i in sorted(chosen)]


def ask(client: httpx.Client, url: str, prompt: str) -> dict:
    """P(yes) of a one-token answer (the yes/no shares of the top alternatives), with the server's own cost."""
    body = {"model": "local", "temperature": 0, "max_tokens": 1, "logprobs": True, "top_logprobs": 20,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]}
    answer = client.post(f"{url}/v1/chat/completions", json=body, timeout=600).raise_for_status().json()
    mass = {"yes": 0.0, "no": 0.0}
    for top in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]:
        word = top["token"].strip().lower()
        if word in mass:
            mass[word] += math.exp(top["logprob"])
    total = mass["yes"] + mass["no"]
    timings = answer.get("timings") or {}
    return {"p_yes": mass["yes"] / total if total > 0 else None, "prompt_tokens": answer["usage"]["prompt_tokens"],
            "server_ms": timings.get("prompt_ms", 0.0) + timings.get("predicted_ms", 0.0)}


def units_of_part(part: str) -> tuple[pd.DataFrame, dict]:
    """One row per unit the no-LM probe decided on ``part`` (its ``p_unsafe``), and the dialogues by id."""
    suite = load_suite(suite_paths(data_dir()), part)
    dialogues = {d.id: d for loaded in suite.values() for d in loaded}
    rows = []
    for turn in read_jsonl_records(PROBES / "suite-no-lm" / "turns.jsonl"):
        if turn["part"] != part or turn["dialogue_id"] not in dialogues:
            continue
        units = sentence_units(dialogues[turn["dialogue_id"]].turns[turn["turn_index"]].text)
        if len(units) != len(turn["claims"]):
            raise SystemExit(f"{turn['dialogue_id']} turn {turn['turn_index']}: {len(units)} sentences, the probe "
                             f"decided {len(turn['claims'])}")
        for k, (unit, claim) in enumerate(zip(units, turn["claims"])):
            rows.append({"dataset": turn["dataset"], "dialogue_id": turn["dialogue_id"],
                         "turn_index": turn["turn_index"], "unit": k, "text": unit, "p_unsafe": claim["p_unsafe"],
                         # unsafe below the rule's threshold: a check of VISTA's categories made it so (a figure or a
                         # name no source holds); every rule below keeps it unsafe
                         "forced": claim["category"] in UNSAFE_CATEGORIES and claim["p_unsafe"] < NO_LM_THRESHOLD})
    return pd.DataFrame(rows), dialogues


def ask_all(units: pd.DataFrame, dialogues: dict, out: Path, words: int, limit: int | None) -> None:
    from vista_dspy.lm.server import LocalServer, embedded_settings

    path = out / "answers.jsonl"
    done = set()
    if path.exists():
        for line in path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["dialogue_id"], r["turn_index"], r["unit"], r["question"]))
    todo = units if limit is None else units.head(limit)
    start, asked = time.monotonic(), 0
    with LocalServer(embedded_settings()) as server, httpx.Client() as client, path.open("a") as sink:
        url = server.settings.url.removesuffix("/v1")
        for n, row in enumerate(todo.itertuples(), 1):
            dialogue = dialogues[row.dialogue_id]
            passages = sources_of(dialogue, row.turn_index)
            prompts = {"support_all": SUPPORT.format(passage="\n".join(passages) or "(none)", unit=row.text),
                       "support_top": SUPPORT.format(passage="\n".join(top_passages(passages, row.text, words))
                                                     or "(none)", unit=row.text),
                       "fact": FACT.format(unit=row.text)}
            for question, prompt in prompts.items():
                if (row.dialogue_id, row.turn_index, row.unit, question) in done:
                    continue
                record = {"dialogue_id": row.dialogue_id, "turn_index": row.turn_index, "unit": row.unit,
                          "question": question, **ask(client, url, prompt)}
                sink.write(json.dumps(record) + "\n")
                sink.flush()
                asked += 1
            if n % 25 == 0:
                print(f"{n}/{len(todo)} units, {asked} questions, {time.monotonic() - start:.0f} s", file=sys.stderr)


def folds(turns: pd.DataFrame, dialogues: dict) -> np.ndarray:
    """Each turn's fold of two, by the suite's dialogue group (sha256's second byte: the first one chose the part)."""
    return np.array([hashlib.sha256(group_id(dialogues[d]).encode("utf-8")).digest()[1] % 2
                     for d in turns["dialogue_id"]])


FEATURES = {
    "cues refit": ["cue_max", "cue_mean"],
    "cues + support_all": ["cue_max", "cue_mean", "all_max", "all_mean"],
    "cues + support_top": ["cue_max", "cue_mean", "top_max", "top_mean"],
    "cues + fact x support_top": ["cue_max", "cue_mean", "top_max", "factual_top_max"],
    "cues + all questions": ["cue_max", "cue_mean", "all_max", "top_max", "factual_top_max", "fact_max"],
    "support_top alone": ["top_max", "top_mean"],
}


KEYS = ["dataset", "dialogue_id", "turn_index"]


def answered_units(units: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    """The units with their three answers as columns; a unit not yet asked every question is left out."""
    wide = answers.pivot_table(index=["dialogue_id", "turn_index", "unit"], columns="question", values="p_yes")
    u = units.merge(wide.reset_index(), on=["dialogue_id", "turn_index", "unit"], how="inner")
    return u.dropna(subset=list(QUESTIONS))


def complete_turns(u: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """The turns (``KEYS``) whose every unit of ``units`` is among those answered (``u``)."""
    have = u.groupby(KEYS)["unit"].count().rename("have").reset_index()
    whole = units.groupby(KEYS)["unit"].count().rename("all").reset_index()
    both = have.merge(whole, on=KEYS)
    return both[both["have"] == both["all"]][KEYS]


def turn_features(u: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """Per turn whose every unit is answered (``u``, from ``answered_units``), the aggregates the fitted rules read."""
    u = u.assign(doubt_all=1 - u["support_all"], doubt_top=1 - u["support_top"],
                 factual_top=u["fact"] * (1 - u["support_top"]))
    agg = u.groupby(KEYS).agg(cue_max=("p_unsafe", "max"), cue_mean=("p_unsafe", "mean"),
                              all_max=("doubt_all", "max"), all_mean=("doubt_all", "mean"),
                              top_max=("doubt_top", "max"), top_mean=("doubt_top", "mean"),
                              factual_top_max=("factual_top", "max"), fact_max=("fact", "max")).reset_index()
    return agg.merge(complete_turns(u, units), on=KEYS)


def fitted_systems(turns: pd.DataFrame, gold: pd.DataFrame, unitless: pd.DataFrame, dialogues: dict
                   ) -> pd.DataFrame:
    """Each feature set's two-fold labels, as rows of the instrument's turn frame; a turn with no sentence unit
    (``unitless``) is faithful, as in every program."""
    from sklearn.linear_model import LogisticRegression

    t = turns.merge(gold, on=KEYS)
    y, fold = (t["gold"] == "hallucinated").to_numpy(), folds(t, dialogues)
    frames = []
    for name, columns in FEATURES.items():
        x = t[columns].to_numpy(float)
        label = np.empty(len(t), dtype=object)
        for k in (0, 1):
            model = LogisticRegression(class_weight="balanced", max_iter=5000).fit(x[fold != k], y[fold != k])
            label[fold == k] = np.where(model.predict(x[fold == k]), "hallucinated", "faithful")
        frames.append(t[[*KEYS, "gold"]].assign(system=name, label=label))
        frames.append(unitless.assign(system=name, label="faithful"))  # no unit, nothing to call unsafe
    return pd.concat(frames, ignore_index=True).assign(model_ms=0.0, calls=0.0, unsafe_claims=0, claims=0)


def logit(p) -> np.ndarray:
    return scipy_logit(np.clip(np.asarray(p, float), 1e-4, 1 - 1e-4))  # as decision._logit bounds it


# (name, the question whose doubt the rule weighs, the weights tried): w = 0 is the cues' threshold refitted.
UNIT_RULES = (("unit rule: cues + support_all", "support_all", WEIGHTS),
              ("unit rule: cues refit", "support_all", (0.0,)),
              ("unit rule: cues + support_top", "support_top", WEIGHTS))


def unit_rule_systems(u: pd.DataFrame, complete: pd.DataFrame, units: pd.DataFrame, gold: pd.DataFrame,
                      dialogues: dict, rules: tuple = UNIT_RULES) -> tuple[pd.DataFrame, dict]:
    """A rule a program can ship, coherent by construction: a unit is unsafe when logit(p_unsafe) + w *
    logit(1 - P(support)) reaches t (or a check made it unsafe), a turn hallucinated iff a unit is. (w, t) chosen
    on one fold for balanced accuracy (``metrics.recall_mean``, every threshold at once) and applied to the other.
    ``rules``: (name, the column of P(support) whose doubt is weighed, the weights tried).
    ``u``: the answered units; ``complete``: the turns whose every unit is answered; a turn with no unit is judged
    too (faithful)."""
    t = pd.concat([gold.merge(complete[KEYS], on=KEYS),
                   gold[~gold.set_index(KEYS).index.isin(units.set_index(KEYS).index)]], ignore_index=True)
    y, fold = (t["gold"] == "hallucinated").to_numpy(), folds(t, dialogues)
    frames, chosen = [], {}
    for name, question, weights in rules:
        tops = {}  # w -> each turn's largest unit score (-inf: no unit)
        for w in weights:
            score = u.assign(s=logit(u["p_unsafe"]) + w * logit(1 - u[question]) + 1e3 * u["forced"])
            top = t.merge(score.groupby(KEYS)["s"].max().reset_index(), on=KEYS, how="left")["s"]
            tops[w] = top.fillna(-np.inf).to_numpy()
        label = np.empty(len(t), dtype=object)
        picks = []
        for k in (0, 1):
            fit, gold_fit = fold != k, y[fold != k]
            counts = np.array([gold_fit.sum(), (~gold_fit).sum()])
            best = None
            for w, top in tops.items():
                cuts = np.unique(top[fit & np.isfinite(top)])
                called = top[fit][None, :] >= cuts[:, None]
                right = np.stack([(called & gold_fit).sum(1), (~called & ~gold_fit).sum(1)], axis=-1)
                accuracy = recall_mean(counts, right)
                i = int(np.argmax(accuracy))  # the first best: the lowest cut of the first weight on a tie
                if best is None or accuracy[i] > best[0]:
                    best = (accuracy[i], w, cuts[i])
            _, w, cut = best
            label[fold == k] = np.where(tops[w][fold == k] >= cut, "hallucinated", "faithful")
            picks.append({"fold": k, "w": float(w), "t": float(cut)})
        chosen[name] = picks
        frames.append(t[[*KEYS, "gold"]].assign(system=name, label=label))
    return (pd.concat(frames, ignore_index=True).assign(model_ms=0.0, calls=0.0, unsafe_claims=0, claims=0),
            chosen)


def report(units: pd.DataFrame, dialogues: dict, out: Path, part: str) -> None:
    answers = pd.DataFrame(read_jsonl_records(out / "answers.jsonl"))
    answers["p_yes"] = answers["p_yes"].astype(float).fillna(0.5)  # neither yes nor no among the alternatives
    u = answered_units(units, answers)
    turns = turn_features(u, units)
    probes = {"seed": "suite-local-1.5b-seed", "default": "suite-local-1.5b-band", "no-lm": "suite-no-lm"}
    shipped = pd.concat([probe_turns(PROBES / d).assign(system=s) for s, d in probes.items()], ignore_index=True)
    shipped = shipped[shipped["part"] == part]
    gold = shipped[shipped["system"] == "no-lm"][["dataset", "dialogue_id", "turn_index", "gold", "claims"]]
    unitless = gold[gold["claims"] == 0].drop(columns="claims")
    rules, chosen = unit_rule_systems(u, turns, units, gold.drop(columns="claims"), dialogues)
    frame = pd.concat([shipped, fitted_systems(turns, gold.drop(columns="claims"), unitless, dialogues), rules],
                      ignore_index=True)
    systems = [*probes, *FEATURES, *chosen]
    table = system_table(frame, systems)
    cost = answers.groupby("question")[["prompt_tokens", "server_ms"]].mean().round(1)
    lines = [f"## Closed questions on the suite's {part} part ({len(turns)} turns, {len(answers)} answers)", "",
             table.to_markdown(index=False, floatfmt=".3f"), "", "### Against the seed (anchored gate)", "",
             "| system | difference | one-sided bound | passes | LM flips vs no-lm (right / wrong) |", "|---|---|---|---|---|"]
    for system in ["default", *FEATURES, *chosen]:
        g = anchored_gate(frame, system, anchor="seed", no_lm="no-lm")
        p = g["datasets"]["pooled"]
        flips = g["lm_flips"]
        lines.append(f"| {system} | {p['difference']:+.3f} | {p['lower_bound']:+.3f} | {g['passes']} | "
                     f"{flips['turns']} ({flips['now_right']} / {flips['now_wrong']}) |")
    lines += ["", "### The unit rules' choices per fold (w: weight of logit(1 - P(support)); t: threshold)", ""]
    lines += [f"- {name}: " + "; ".join(f"fold {p['fold']}: w {p['w']:.2f}, t {p['t']:+.2f}" for p in picks)
              for name, picks in chosen.items()]
    lines += ["", "### Cost per question (mean per unit)", "", cost.to_markdown()]
    text = "\n".join(lines) + "\n"
    (out / "closed_questions.md").write_text(text)
    table.to_csv(out / "closed_questions.csv", index=False)
    print(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("compile", "test"), default="compile")
    parser.add_argument("--out", type=Path, required=True, help="run folder (answers.jsonl, tables); resumable")
    parser.add_argument("--words", type=int, default=60, help="the evidence budget of support_top, in words")
    parser.add_argument("--limit", type=int, default=None, help="ask for the first N units only (a slice)")
    parser.add_argument("--no-ask", action="store_true", help="no LM: the tables from the answers already in OUT")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    units, dialogues = units_of_part(args.part)
    if not args.no_ask:
        ask_all(units, dialogues, args.out, args.words, args.limit)
    report(units, dialogues, args.out, args.part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
