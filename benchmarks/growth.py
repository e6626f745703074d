"""Cost that grows as the work grows (issue 63): per judged turn, the model's time, prompt and written tokens, LM
calls, peak memory and verdicts, as

  (a) the sources grow: each reference of the quick-start dialogue padded to 200, 1,000, 5,000 and 20,000 words with
      unrelated Wizard-of-Wikipedia knowledge passages (BEGIN's WoW test file), half before and half after the true
      one, against the same dialogue with its own passages alone (0);
  (b) the dialogue grows: 5, 20 and 50 judged turns of real WoW turns (consecutive BEGIN rows: the user's message,
      the assistant's response grounded in its knowledge passage);
  (c) the dialogues grow: 10, 100 and 1,000 dialogues of two judged WoW turns each, judged one after another in one
      process: throughput per stretch and the process's memory after each (flat after the warm-up, or not).

    python benchmarks/growth.py --fake    a fake OpenAI-compatible server (vista_dspy/lm/fake/) with the embedded
                                          model's 8,192-token context: the hosted path's prompt sizes, and which
                                          prompts would not fit (its "model time" is 1 ms a token read, 10 a token
                                          written: a proxy, not a model)
    python benchmarks/growth.py --no-lm   the tier that asks no LM (the shipped program's evidence over sentences)
    python benchmarks/growth.py --live    the embedded model (alone on the cores; slow: run by hand)

Programs: the shipped default (``compiled/local.json``) and the seed (the paper's method), each under the reading
``turn`` (the default: sources whole within their budgets, else the passages ranked for the turn's units, one set per
turn), ``unit`` (per claim) and ``full`` (every word: the paper's reading); FActScore and LLM-as-Judge under ``turn``
and ``full`` (``--fake`` and ``--live``). Prompt tokens are the endpoint's count; "uncached" tokens are what a server
with one prefix-cache slot per stage (llama.cpp's, sized as the notes say) would read: each prompt less the prefix it
shares with that stage's previous prompt. Peak memory: tracemalloc's peak while judging (a) and (b); (c) reads the
resident set size (``/proc/self/statm``) after a garbage collection, tracemalloc off, the fake server's log of the
requests it answered emptied (the test double's memory, in this process); memory is "flat after warm-up" when the
resident set after 1,000 dialogues is at most FLAT_MB above its value after the first WARM_UP (``flat``).

Writes ``growth-<mode>.json`` (--only: its other growths kept) and ``growth-<mode>-*.png`` under --out (default
benchmarks/growth/) and prints whether memory stayed flat and the ratios
issue 63 is done by: prompt tokens per LM call at 5,000 and 20,000 words against the turn's own passage alone (at most
1.5x), and of the 50-turn dialogue against the 5-turn one (at most 1.5x), with the ERROR claims of each.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.json"
SIZES = (0, 200, 1_000, 5_000, 20_000)
TURNS = (5, 20, 50)
DIALOGUES = (10, 100, 250, 500, 750, 1_000)
CONTEXT = 8_192  # the embedded model's tokens per slot (lm/server.py), the fake server's refusal threshold
DONE_WHEN = 1.5
# Memory "flat after warm-up" (issue 63): the resident set after the last of DIALOGUES at most FLAT_MB above its value
# after WARM_UP dialogues (growth.flat).
WARM_UP = 100
FLAT_MB = 2.0


# ---- data ---------------------------------------------------------------------------------------------------------
def begin_rows(data: Path) -> list:
    """BEGIN's WoW test dialogues (one judged turn each, in file order)."""
    from vista_dspy.data.begin import load_begin

    return load_begin(data / "begin" / "wow" / "begin_test_wow.tsv")


def knowledge_passages(rows: list) -> list[str]:
    """The distinct WoW knowledge passages of ``rows``, in a fixed shuffled order."""
    passages = list(dict.fromkeys(d.turns[-1].grounding.document.strip() for d in rows))
    random.Random(63).shuffle(passages)
    return passages


def padded(document: str, words: int, passages: list[str]) -> str:
    """``document`` with unrelated passages around it (alternately before and after, each its own paragraph), about
    ``words`` words in all (0: the document alone)."""
    before: list[str] = []
    after: list[str] = []
    size, i = len(document.split()), 0
    while size < words:
        passage = passages[i % len(passages)]
        (before if i % 2 == 0 else after).append(passage)
        size += len(passage.split())
        i += 1
    return "\n".join([*reversed(before), document, *after])


def with_sources(dialogue, words: int, passages: list[str]):
    """The dialogue with every reference padded to ``words`` words."""
    turns = [t.model_copy(update={"grounding": t.grounding.model_copy(update={"document": padded(
        t.grounding.document, words, passages)})}) if t.role == "assistant" and t.grounding.document else t
        for t in dialogue.turns]
    return dialogue.model_copy(update={"id": f"{dialogue.id}-{words}w", "turns": turns})


def wow_dialogue(rows: list, judged: int, start: int = 0, name: str = "wow"):
    """A dialogue of ``judged`` consecutive BEGIN rows: each row's user message (when it has one) and its assistant
    response, judged against its knowledge passage."""
    from vista_dspy.schema import Dialogue

    turns = [t for d in rows[start:start + judged] for t in d.turns]
    return Dialogue(id=f"{name}-{start}-{judged}", turns=turns)


# ---- judges -------------------------------------------------------------------------------------------------------
def judges(mode: str, short_answer_tokens: int | None) -> dict[str, object]:
    from vista_dspy import Vista
    from vista_dspy.baselines import FActScore, LLMJudge

    if mode == "no-lm":  # (no prompt: the reading changes nothing but the claims' records)
        return {"evidence/turn": Vista.evidence_from_program("local", units="sentences")}
    endpoint = {"short_answer_tokens": short_answer_tokens}
    found: dict[str, object] = {}
    for reading in ("turn", "unit", "full"):
        found[f"default/{reading}"] = Vista.for_model("local", evidence=reading, **endpoint)
        found[f"seed/{reading}"] = Vista.from_program("seed", evidence=reading, **endpoint)
    for reading in ("turn", "full"):
        found[f"factscore/{reading}"] = FActScore(evidence=reading, **endpoint)
        found[f"judge/{reading}"] = LLMJudge(evidence=reading, **endpoint)
    return found


class Endpoint:
    """The LM a mode judges with, and the prompts it answered (for the prefix-cache count)."""

    def __init__(self, mode: str) -> None:
        self.mode, self.server, self.lm, self.short_answer_tokens = mode, None, None, None
        self._stack = []

    def __enter__(self):
        from vista_dspy.lm.models import ModelConfig

        if self.mode == "fake":
            from vista_dspy.lm.fake import FakeOpenAIServer

            self.server = FakeOpenAIServer(context_tokens=CONTEXT).__enter__()
            self._stack.append(self.server)
            self.lm = ModelConfig(model="openai/fake", api_base=self.server.url, num_retries=0, cache=False).build()
        elif self.mode == "live":
            from vista_dspy.lm.server import (
                LOCAL_SHORT_ANSWER_TOKENS,
                LocalServer,
                embedded_settings,
                local_model_config,
            )

            settings = embedded_settings("local")
            server = LocalServer(settings).__enter__()
            self._stack.append(server)
            self.lm = local_model_config(settings, max_tokens=768, cache=False).build()
            self.short_answer_tokens = LOCAL_SHORT_ANSWER_TOKENS
        return self

    def __exit__(self, *exc):
        for thing in reversed(self._stack):
            thing.__exit__(*exc)

    def seen(self) -> int:
        return len(self.server.prompts) if self.server is not None else 0

    def forget(self) -> None:
        """Empty the fake server's log of the requests it answered (kept for the prefix-cache count of (a) and (b)):
        it lives in this process, and is the test double's memory, not the judge's."""
        if self.server is not None:
            for log in (self.server.models, self.server.prompts, self.server.engine.requests,
                        self.server.engine.message_counts):
                log.clear()

    def uncached(self, since: int) -> int | None:
        """Prompt tokens a server with one prefix-cache slot per stage would read for the requests after ``since``:
        each prompt's last message less the prefix it shares with the same stage's previous one (the system prompt
        and demos before it are the same on every call of a stage, and read once)."""
        if self.server is None:
            return None
        last: dict[str, str] = {}
        total = 0
        for (_, stage), prompt in zip(self.server.models[since:], self.server.prompts[since:]):
            previous = last.get(stage, "")
            shared = len(os.path.commonprefix([previous, prompt]))
            total += (len(prompt) - shared) // 4
            last[stage] = prompt
        return total


def judge_all(judge, dialogues: list, endpoint: Endpoint, *, trace: bool = True) -> dict:
    """Judge ``dialogues`` one after another; per judged turn: calls, tokens, model ms, uncached prompt tokens, and
    tracemalloc's peak (MB); with the verdicts."""
    import dspy

    from vista_dspy.lm.clients.adapters import build_adapter
    from vista_dspy.schema import Usage
    from vista_dspy.scoring import evidence_read

    cold()
    since = endpoint.seen()
    usage = Usage()
    verdicts = []
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    with dspy.context(lm=endpoint.lm, adapter=build_adapter("json")):
        for dialogue in dialogues:
            verdict = judge(dialogue)
            usage.merge(verdict.usage)
            verdicts.append(verdict)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] / 2**20 if trace else None
    if trace:
        tracemalloc.stop()
    total = usage.total
    turns = sum(len(v.turns) for v in verdicts)
    claims = [c for v in verdicts for t in v.turns for c in t.claims]
    read = [c.checked_against for c in claims if c.checked_against is not None and c.stage != "evidence"]
    evidence = evidence_read(verdicts, [t for v in verdicts for t in v.turns])
    return {
        "judged_turns": turns,
        "calls": total.calls,
        "prompt_tokens": total.prompt_tokens,
        "completion_tokens": total.completion_tokens,
        "uncached_prompt_tokens": endpoint.uncached(since),
        "model_ms": round(total.model_ms, 1),
        "wall_s": round(seconds, 3),
        "peak_mb": round(peak, 2) if peak is not None else None,
        "per_turn": {"calls": _div(total.calls, turns), "prompt_tokens": _div(total.prompt_tokens, turns),
                     "completion_tokens": _div(total.completion_tokens, turns),
                     "model_ms": _div(total.model_ms, turns), "wall_s": _div(seconds, turns)},
        "prompt_tokens_per_call": _div(total.prompt_tokens, total.calls),
        "errors": sum(c.category.value == "ERROR" for c in claims) + sum(t.error is not None and not t.claims
                                                                        for v in verdicts for t in v.turns),
        "error_reasons": sorted({(c.error or "").split(":")[0] for c in claims if c.category.value == "ERROR"}),
        "labels": [t.label for v in verdicts for t in v.turns],
        "categories": [[c.category.value for c in t.claims] for v in verdicts for t in v.turns],
        "claims_read_in_part": evidence["claims_read_in_part"],
        "store_claims_read_per_claim": _div(sum(len(r.knowledge) for r in read), len(read)),
    }


def cold() -> None:
    """Empty the text caches (sentences, paragraphs, a turn's evidence), so that no measurement reuses the work of the
    one before it."""
    from vista_dspy import evidence, grounding

    for cache in (grounding._sentences, evidence._paragraphs, evidence._turn_evidence):
        cache.cache_clear()


def _div(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


# ---- the three growths --------------------------------------------------------------------------------------------
def sources_growth(found: dict, endpoint: Endpoint, passages: list[str]) -> dict:
    from vista_dspy.data import load_dialogues

    base = load_dialogues(QUICKSTART)[0]
    out: dict = {}
    for name, judge in found.items():
        out[name] = {}
        for words in SIZES:
            out[name][str(words)] = judge_all(judge, [with_sources(base, words, passages)], endpoint)
            _say(f"(a) {name} {words} words", out[name][str(words)])
    return out


def dialogue_growth(found: dict, endpoint: Endpoint, rows: list) -> dict:
    out: dict = {}
    for name, judge in found.items():
        if name.startswith(("factscore", "judge")):
            continue  # the baselines keep no store; their history is LLM-as-Judge's alone
        out[name] = {}
        for judged in TURNS:
            out[name][str(judged)] = judge_all(judge, [wow_dialogue(rows, judged)], endpoint)
            _say(f"(b) {name} {judged} turns", out[name][str(judged)])
    return out


def dialogues_growth(judge, endpoint: Endpoint, rows: list) -> dict:
    """Up to the last of ``DIALOGUES`` two-turn dialogues, judged in one process; at each checkpoint the stretch's
    throughput and the resident memory after a collection."""
    import dspy

    from vista_dspy.cli.common import without_call_history
    from vista_dspy.lm.clients.adapters import build_adapter

    without_call_history()  # as `vista evaluate`: a run keeps no call history and no DSPy trace
    dialogues = [wow_dialogue(rows, 2, start=2 * i, name="run") for i in range(DIALOGUES[-1])]
    cold()
    points = []
    done, previous, started = 0, 0, time.perf_counter()
    with dspy.context(lm=endpoint.lm, adapter=build_adapter("json")):
        for target in DIALOGUES:
            stretch = time.perf_counter()
            calls = 0
            for dialogue in dialogues[done:target]:
                calls += judge(dialogue).usage.total.calls
            seconds = time.perf_counter() - stretch
            endpoint.forget()
            gc.collect()
            points.append({"dialogues": target, "stretch": target - previous, "stretch_s": round(seconds, 2),
                           "dialogues_per_s": round((target - previous) / seconds, 2), "calls": calls,
                           "rss_mb": round(_rss_mb(), 1),
                           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                           "caches": _cache_sizes()})
            _say(f"(c) {target} dialogues", points[-1])
            done = previous = target
    return {"points": points, "wall_s": round(time.perf_counter() - started, 1), "flat": flat(points)}


def flat(points: list[dict]) -> dict:
    """Whether memory is flat after the warm-up: the resident set after the last checkpoint at most ``FLAT_MB`` MB
    above its value after ``WARM_UP`` dialogues (the text caches, bounded, filled by then; the imports' and the
    first calls' memory counted in the warm-up)."""
    warm = next(p for p in points if p["dialogues"] == WARM_UP)
    last = points[-1]
    grown = round(last["rss_mb"] - warm["rss_mb"], 1)
    return {"warm_up": WARM_UP, "after": last["dialogues"], "rss_mb_after_warm_up": warm["rss_mb"],
            "rss_mb_at_end": last["rss_mb"], "grown_mb": grown, "tolerance_mb": FLAT_MB, "meets": grown <= FLAT_MB}


def _cache_sizes() -> dict[str, str]:
    """Entries / bound of the text caches that hold memory between dialogues (bounded: memory they hold stops
    growing once they are full)."""
    from vista_dspy import evidence, grounding

    caches = {"sentences": grounding._sentences, "paragraphs": evidence._paragraphs,
              "turn_evidence": evidence._turn_evidence}
    return {name: f"{c.cache_info().currsize}/{c.cache_info().maxsize}" for name, c in caches.items()}


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _say(what: str, row: dict) -> None:
    keys = ("prompt_tokens_per_call", "uncached_prompt_tokens", "calls", "errors", "dialogues_per_s", "rss_mb")
    print(what, {k: row[k] for k in keys if k in row}, file=sys.stderr, flush=True)


# ---- what issue 63 is done by, and pictures ----------------------------------------------------------------------
def done_when(record: dict) -> list[dict]:
    rows = []
    for name, sizes in record["sources"].items():
        alone = sizes["0"]["prompt_tokens_per_call"]
        for words in ("5000", "20000"):
            row = sizes[words]
            ratio = _div(row["prompt_tokens_per_call"], alone) if alone and row["prompt_tokens_per_call"] else None
            rows.append({"growth": "sources", "judge": name, "at": f"{words} words", "ratio": ratio,
                         "errors": row["errors"], "meets": ratio is not None and ratio <= DONE_WHEN and not row["errors"]})
    for name, turns in record.get("dialogue", {}).items():
        five, fifty = turns["5"]["prompt_tokens_per_call"], turns["50"]["prompt_tokens_per_call"]
        ratio = _div(fifty, five) if five and fifty else None
        rows.append({"growth": "dialogue", "judge": name, "at": "50 vs 5 turns", "ratio": ratio,
                     "errors": turns["50"]["errors"], "meets": ratio is not None and ratio <= DONE_WHEN
                     and not turns["50"]["errors"]})
    return rows


def pictures(record: dict, out: Path, mode: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    metric = "prompt_tokens_per_call" if mode != "no-lm" else "wall_s"
    label = "prompt tokens per LM call" if mode != "no-lm" else "seconds per judged turn (no LM)"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, sizes in record["sources"].items():
        xs = [max(int(w), 50) for w in sizes]
        # A size whose prompts did not fit (ERROR claims) has no point: its failed calls count no tokens.
        ys = [float("nan") if row["errors"] else (row[metric] if mode != "no-lm" else row["per_turn"]["wall_s"])
              for row in sizes.values()]
        failed = [w for w, row in sizes.items() if row["errors"]]
        ax.plot(xs, ys, marker="o", label=name + (f" (ERROR from {failed[0]} words)" if failed else ""))
    ax.set_xscale("log")
    ax.set_xlabel("words of sources per reference (the own passage alone plotted at 50)")
    ax.set_ylabel(label)
    ax.set_title(f"(a) the sources grow [{mode}]")
    ax.legend(fontsize=7)
    written.append(_save(fig, out / f"growth-{mode}-sources.png"))
    if record.get("dialogue"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, turns in record["dialogue"].items():
            ys = [(row[metric] if mode != "no-lm" else row["per_turn"]["wall_s"]) for row in turns.values()]
            ax.plot([int(t) for t in turns], ys, marker="o", label=name)
        ax.set_xlabel("judged turns in the dialogue")
        ax.set_ylabel(label)
        ax.set_title(f"(b) the dialogue grows [{mode}]")
        ax.legend(fontsize=7)
        written.append(_save(fig, out / f"growth-{mode}-dialogue.png"))
    points = record["dialogues"]["points"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot([p["dialogues"] for p in points], [p["dialogues_per_s"] for p in points], marker="o")
    left.set_xscale("log")
    left.set_xlabel("dialogues judged")
    left.set_ylabel("dialogues per second (the stretch since the last point)")
    right.plot([p["dialogues"] for p in points], [p["rss_mb"] for p in points], marker="o", label="resident")
    right.plot([p["dialogues"] for p in points], [p["max_rss_mb"] for p in points], marker="x", label="peak")
    right.set_xscale("log")
    right.set_xlabel("dialogues judged")
    right.set_ylabel("MB")
    right.legend()
    fig.suptitle(f"(c) the dialogues grow [{mode}]: {record['dialogues']['judge']}")
    written.append(_save(fig, out / f"growth-{mode}-dialogues.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_mutually_exclusive_group(required=True)
    modes.add_argument("--fake", dest="mode", action="store_const", const="fake")
    modes.add_argument("--no-lm", dest="mode", action="store_const", const="no-lm")
    modes.add_argument("--live", dest="mode", action="store_const", const="live")
    parser.add_argument("--data", type=Path, default=None, help="the benchmark data folder (default: data_dir())")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "growth")
    parser.add_argument("--only", choices=("sources", "dialogue", "dialogues"), action="append",
                        help="run these growths only (default: all three)")
    args = parser.parse_args()


    from vista_dspy.cli.common import without_call_history
    from vista_dspy.data.location import data_dir

    without_call_history()
    data = args.data or data_dir(ROOT)
    rows = begin_rows(data)
    passages = knowledge_passages(rows)
    only = set(args.only or ("sources", "dialogue", "dialogues"))
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with Endpoint(args.mode) as endpoint:
        found = judges(args.mode, endpoint.short_answer_tokens)
        record: dict = {"mode": args.mode, "data": "begin/wow/begin_test_wow.tsv (knowledge passages, rows in order)",
                        "quickstart": "examples/quickstart.json", "context_tokens": CONTEXT if args.mode == "fake"
                        else None, "judges": {n: j.option_values() for n, j in found.items()}}
        if "sources" in only:
            record["sources"] = sources_growth(found, endpoint, passages)
        if "dialogue" in only:
            record["dialogue"] = dialogue_growth(found, endpoint, rows)
        if "dialogues" in only:
            name = "evidence/turn" if args.mode == "no-lm" else "default/turn"
            record["dialogues"] = {"judge": name, **dialogues_growth(found[name], endpoint, rows)}
    record["wall_s"] = round(time.time() - started, 1)
    if "sources" in record and "dialogue" in record and args.mode != "no-lm":
        record["done_when"] = done_when(record)
    path = args.out / f"growth-{args.mode}.json"
    if args.only and path.exists():  # the growths not rerun keep their recorded rows
        record = {**json.loads(path.read_text()), **record}
    path.write_text(json.dumps(record, indent=1) + "\n")
    if {"sources", "dialogue", "dialogues"} <= record.keys():
        for picture in pictures(record, args.out, args.mode):
            print(f"wrote {picture}", file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)
    if "dialogues" in record:
        f = record["dialogues"]["flat"]
        print(f"dialogues memory: {f['rss_mb_after_warm_up']} MB after {f['warm_up']} dialogues, {f['rss_mb_at_end']} MB "
              f"after {f['after']}: grown {f['grown_mb']} MB, {'flat' if f['meets'] else 'NOT FLAT'} "
              f"(<= {f['tolerance_mb']} MB)")
    for row in record.get("done_when", []):
        print(f"{row['growth']:9} {row['judge']:16} {row['at']:14} ratio {row['ratio']}  errors {row['errors']}  "
              f"{'meets' if row['meets'] else 'MISSES'} <= {DONE_WHEN}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
