"""Issue 49's last lever, its premise measured before anything is built: does the embedded model's own hidden state,
read by a regularised linear probe fitted per model, tell a sentence the sources do not support better than the
evidence cues alone -- where its one-token answers (``closed_questions.py``) did not?

For every sentence unit of a part of the suite (the units the no-LM probe ``suite-no-lm`` decided, as in
``closed_questions.py``), the model reads the support question over the unit's evidence (the source sentences BM25
ranks highest for it, within ``--words`` words) in Qwen's chat format, up to where its answer would begin; llama.cpp
returns the last token's hidden state (``--pooling last``: the state the answer is read from) or the mean over the
prompt. The states are appended to ``OUT/states.jsonl`` as they come (a rerun reads only what is missing).

Then, with no LM, on the chosen part, two-fold (folds by the suite's dialogue group, as ``closed_questions.folds``):
- the probe: standardised states, PCA to ``--components`` dimensions, an L2 logistic regression (C chosen by grouped
  inner cross-validation on log-loss) whose target is the unit's turn label (the suite's gold is per turn); fitted on one fold,
  read on the other;
- the rule a program could ship, coherent by construction (``closed_questions.unit_rule_systems``): a unit is unsafe
  when logit P(unsafe) + w * logit(probe) reaches t, a turn hallucinated iff one is; (w, t) chosen on the fitting
  fold's own out-of-fold probe scores (five grouped inner folds), so nothing is chosen on scores the probe was fitted
  to. w = 0 among the weights: the cues' threshold refitted.
The table sets them beside the seed, the shipped default and the no-LM tier on the same turns, with the anchored gate
and the turn labels each changes against the no-LM tier, and the turn-level AUC of each signal alone.

    python benchmarks/hidden_state_probe.py --part compile --out RUN [--limit N]   # states, then the tables
    python benchmarks/hidden_state_probe.py --part compile --out RUN --no-ask      # the tables from RUN alone
    python benchmarks/hidden_state_probe.py --out SYNTH --synthetic --components 16  # the fitting checked, no LM

Needs the ``[bench]`` and ``[local]`` extras and the model alone on the machine: it loads the embedded model in this
process with embeddings on (llama.cpp serves either embeddings or completions). Fit and choose on the compile part.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from closed_questions import (
    KEYS,
    PROBES,
    SUPPORT,
    SYSTEM,
    WEIGHTS,
    complete_turns,
    folds,
    sources_of,
    top_passages,
    unit_rule_systems,
    units_of_part,
)

from vista_dspy.data.suite import group_id
from vista_dspy.experiments.instrument import probe_turns
from vista_dspy.optimize.gate import anchored_gate, system_table

CHAT = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
SHIPPED = {"seed": "suite-local-1.5b-seed", "default": "suite-local-1.5b-band", "no-lm": "suite-no-lm"}


def prompt_of(row, dialogues: dict, words: int) -> str:
    passages = top_passages(sources_of(dialogues[row.dialogue_id], row.turn_index), row.text, words)
    return CHAT.format(system=SYSTEM, user=SUPPORT.format(passage="\n".join(passages) or "(none)", unit=row.text))


def embedding_server(pooling: str):
    """The embedded 1.5B loaded in this process with llama.cpp's embeddings on (one slot, no normalisation)."""
    import xllamacpp

    from vista_dspy.lm.server import embedded_settings, server_params

    params = server_params(embedded_settings())
    params.embedding = True
    params.pooling_type = getattr(xllamacpp.llama_pooling_type, f"LLAMA_POOLING_TYPE_{pooling.upper()}")
    params.embd_normalize = -1
    params.n_parallel = 1
    params.n_ctx = 4096
    return xllamacpp.Server(params)


def read_states(path: Path) -> dict[tuple, list[float]]:
    if not path.exists():
        return {}
    return {(r["dialogue_id"], r["turn_index"], r["unit"]): r["state"]
            for r in map(json.loads, path.read_text().splitlines())}


def embed_all(units: pd.DataFrame, dialogues: dict, out: Path, words: int, pooling: str, limit: int | None) -> None:
    path = out / "states.jsonl"
    done = read_states(path)
    todo = [row for row in (units if limit is None else units.head(limit)).itertuples()
            if (row.dialogue_id, row.turn_index, row.unit) not in done]
    if not todo:
        return
    server, start = embedding_server(pooling), time.monotonic()
    with path.open("a") as sink:
        for n, row in enumerate(todo, 1):
            answer = server.handle_embeddings({"input": prompt_of(row, dialogues, words), "model": "local"})
            if isinstance(answer, str):
                answer = json.loads(answer)
            if "error" in answer:
                raise SystemExit(f"{row.dialogue_id} turn {row.turn_index} unit {row.unit}: {answer['error']}")
            state = answer["data"][0]["embedding"]
            sink.write(json.dumps({"dialogue_id": row.dialogue_id, "turn_index": row.turn_index, "unit": row.unit,
                                   "tokens": answer.get("usage", {}).get("prompt_tokens"),
                                   "state": [round(float(v), 5) for v in state]}) + "\n")
            sink.flush()
            if n % 25 == 0 or n == len(todo):
                print(f"{n}/{len(todo)} units, {time.monotonic() - start:.0f} s", file=sys.stderr)


def synthetic_states(units: pd.DataFrame, out: Path) -> None:
    """A check of the fitting, not of the model: 64 numbers a unit, noise but for four that carry its turn's label
    (shifted by 1.5 either way); a probe that cannot find that is broken."""
    gold = probe_turns(PROBES / "suite-no-lm").set_index(["dialogue_id", "turn_index"])["gold"]
    rng = np.random.default_rng(0)
    with (out / "states.jsonl").open("w") as sink:
        for row in units.itertuples():
            state = rng.normal(size=64)
            state[:4] += 1.5 if gold[(row.dialogue_id, row.turn_index)] == "hallucinated" else -1.5
            sink.write(json.dumps({"dialogue_id": row.dialogue_id, "turn_index": row.turn_index, "unit": row.unit,
                                   "tokens": 0, "state": state.round(4).tolist()}) + "\n")


def probe_model(components: int, groups: np.ndarray, x: np.ndarray, y: np.ndarray):
    """Standardise, PCA, L2 logistic regression with C chosen by five grouped inner folds on log-loss (so its
    probabilities keep a scale a rule can weigh; balanced classes)."""
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    inner = list(GroupKFold(n_splits=5).split(x, y, groups))
    model = make_pipeline(StandardScaler(), PCA(n_components=components, random_state=0),
                          LogisticRegressionCV(Cs=np.logspace(-4, 1, 11), l1_ratios=(0,), cv=inner,
                                               class_weight="balanced", scoring="neg_log_loss", max_iter=5000,
                                               use_legacy_attributes=False))
    return model.fit(x, y)


def probe_scores(u: pd.DataFrame, x: np.ndarray, fold: np.ndarray, components: int) -> dict[int, np.ndarray]:
    """Per outer fold k, every unit's probe P(unsafe): held out for the units of fold k (the probe fitted on the
    other fold) and out-of-fold within the other fold (five grouped inner fits), the scores a rule is chosen on."""
    from sklearn.model_selection import GroupKFold

    y = (u["gold"] == "hallucinated").to_numpy()
    groups = u["group"].to_numpy()
    scores = {}
    for k in (0, 1):
        fit = fold != k
        s = np.empty(len(u))
        s[~fit] = probe_model(components, groups[fit], x[fit], y[fit]).predict_proba(x[~fit])[:, 1]
        idx = np.flatnonzero(fit)
        for a, b in GroupKFold(n_splits=5).split(idx, y[idx], groups[idx]):
            model = probe_model(components, groups[idx[a]], x[idx[a]], y[idx[a]])
            s[idx[b]] = model.predict_proba(x[idx[b]])[:, 1]
        scores[k] = s
    return scores


def report(units: pd.DataFrame, dialogues: dict, out: Path, part: str, components: int) -> str:
    from sklearn.metrics import roc_auc_score

    states = read_states(out / "states.jsonl")
    shipped = pd.concat([probe_turns(PROBES / d).assign(system=s) for s, d in SHIPPED.items()], ignore_index=True)
    shipped = shipped[shipped["part"] == part]
    gold = shipped[shipped["system"] == "no-lm"][[*KEYS, "gold", "claims"]]
    u = units[[(r.dialogue_id, r.turn_index, r.unit) in states for r in units.itertuples()]]
    complete = complete_turns(u, units)
    u = u.merge(complete, on=KEYS).merge(gold[[*KEYS, "gold"]], on=KEYS).reset_index(drop=True)
    u["group"] = [group_id(dialogues[d]) for d in u["dialogue_id"]]
    x = np.array([states[(r.dialogue_id, r.turn_index, r.unit)] for r in u.itertuples()], dtype=np.float32)
    fold = folds(u, dialogues)
    scores = probe_scores(u, x, fold, components)
    rules = ((f"unit rule: cues + probe ({components} components)", "probe_safe", WEIGHTS),
             ("unit rule: cues refit", "probe_safe", (0.0,)))
    frames, chosen = [], {}
    for k in (0, 1):  # fold k's labels from the rule chosen on the other fold's out-of-fold scores
        framed, picks = unit_rule_systems(u.assign(probe_safe=1 - scores[k]), complete, units,
                                          gold.drop(columns="claims"), dialogues, rules=rules)
        kept = framed[folds(framed, dialogues) == k]
        frames.append(kept)
        for name, per_fold in picks.items():
            chosen.setdefault(name, []).append(per_fold[k])
    rule_frame = pd.concat(frames, ignore_index=True)
    frame = pd.concat([shipped, rule_frame], ignore_index=True)
    systems = [*SHIPPED, *chosen]
    table = system_table(frame, systems)
    # each signal alone, turn level: the turn's largest unit score, held out (two-fold) for the probe
    held = np.where(fold == 0, scores[0], scores[1])
    turn = u.assign(probe=held).groupby(KEYS).agg(probe=("probe", "max"), cue=("p_unsafe", "max"),
                                                  gold=("gold", "first")).reset_index()
    y = (turn["gold"] == "hallucinated").to_numpy()
    auc = {name: roc_auc_score(y, turn[name]) for name in ("cue", "probe")}
    auc["cue + probe (rank mean)"] = roc_auc_score(y, turn["cue"].rank() + turn["probe"].rank())
    lines = [f"## The hidden-state probe on the suite's {part} part ({len(complete)} turns with states, {len(u)} "
             f"units, {x.shape[1]} dimensions -> {components})", "", table.to_markdown(index=False, floatfmt=".3f"),
             "", "### Against the seed (anchored gate)", "",
             "| system | difference | one-sided bound | passes | turn labels changed vs no-lm (right / wrong) |",
             "|---|---|---|---|---|"]
    for system in ["default", *chosen]:
        g = anchored_gate(frame, system, anchor="seed", no_lm="no-lm")
        p, flips = g["datasets"]["pooled"], g["lm_flips"]
        lines.append(f"| {system} | {p['difference']:+.3f} | {p['lower_bound']:+.3f} | {g['passes']} | "
                     f"{flips['turns']} ({flips['now_right']} / {flips['now_wrong']}) |")
    lines += ["", "### Each signal alone (turn AUC of the turn's largest unit score; the probe held out)", ""]
    lines += [f"- {name}: {value:.3f}" for name, value in auc.items()]
    lines += ["", "### The rules' choices per fold (w: weight of the probe's logit; t: threshold)", ""]
    lines += [f"- {name}: " + "; ".join(f"fold {p['fold']}: w {p['w']:.2f}, t {p['t']:+.2f}" for p in picks)
              for name, picks in chosen.items()]
    text = "\n".join(lines) + "\n"
    (out / f"hidden_state_{part}.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("compile", "test"), default="compile")
    parser.add_argument("--out", type=Path, required=True, help="run folder (states.jsonl, tables); resumable")
    parser.add_argument("--words", type=int, default=60, help="the evidence budget of the question, in words")
    parser.add_argument("--pooling", choices=("last", "mean"), default="last")
    parser.add_argument("--components", type=int, default=32, help="PCA dimensions before the probe")
    parser.add_argument("--limit", type=int, default=None, help="the first N units only (a slice)")
    parser.add_argument("--no-ask", action="store_true", help="no LM: the tables from the states already in OUT")
    parser.add_argument("--synthetic", action="store_true",
                        help="no LM: write synthetic states that carry each turn's label into OUT, then the tables")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    units, dialogues = units_of_part(args.part)
    if args.synthetic:
        synthetic_states(units, args.out)
    elif not args.no_ask:
        embed_all(units, dialogues, args.out, args.words, args.pooling, args.limit)
    print(report(units, dialogues, args.out, args.part, args.components))
    return 0


if __name__ == "__main__":
    sys.exit(main())
