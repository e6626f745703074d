"""Sources and dialogues of any length (issue 63): a prompt reads the passages that decide within a token budget, so
a turn with 5,000 or 20,000 words of sources is judged with no ERROR on a model with 8,192 tokens of context and at
most 1.5x the prompt tokens per call of the same turn with its own passage alone; a 50-turn dialogue's prompts are
at most 1.5x a 5-turn one's; the paper's full reading still sends everything, and `vista evaluate` and `vista
benchmark` take it (--evidence) and record the reading a run used; and each claim records what it was checked against. Fake LMs only: the fake OpenAI-compatible server refuses a prompt longer than its context as
llama.cpp does."""

import json
from pathlib import Path

import dspy
import pytest
from helpers import assistant, dialogue, user
from typer.testing import CliRunner

from vista_dspy import Vista
from vista_dspy.baselines import FActScore, LLMJudge
from vista_dspy.cli import app
from vista_dspy.data import load_dialogues
from vista_dspy.evidence.reading import OMITTED, bounded_history, tokens
from vista_dspy.lm.clients.adapters import build_adapter
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.lm.models import ModelConfig
from vista_dspy.schema import Grounding, Turn

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.json"
CONTEXT = 8_192  # the embedded model's tokens per slot

# Unrelated passages, each a paragraph of its own under a title line, none about Tromsø, Norway or the aurora.
_SUBJECTS = ("The violin", "Basalt", "The Danube", "Origami", "The okapi", "Saffron", "The tuba", "Graphite",
             "Kombucha", "The abacus", "Cork oak", "The harpsichord", "Quartz", "The axolotl", "Papyrus", "Chess")
_FACTS = ("was described by scholars of the {n}th century", "is studied in {n} universities",
          "appears in {n} museum collections", "was traded along {n} old routes", "has {n} recognised varieties",
          "is the subject of {n} festivals", "was catalogued by {n} naturalists", "needs {n} steps to prepare")


def unrelated(k: int) -> str:
    subject = _SUBJECTS[k % len(_SUBJECTS)]
    first, second = _FACTS[k % len(_FACTS)], _FACTS[(k // len(_FACTS) + 3) % len(_FACTS)]
    return (f"{subject} note {k}\n{subject} {first.format(n=k % 97 + 2)}. "
            f"In records kept since {1500 + k % 400}, it {second.format(n=k % 31 + 3)}.")


def padded(document: str, words: int) -> str:
    before, after, size, k = [], [], len(document.split()), 0
    while size < words:
        passage = unrelated(k)
        (before if k % 2 == 0 else after).append(passage)
        size += len(passage.split())
        k += 1
    return "\n".join([*before, document, *after])


def with_sources(dlg, words):
    turns = [t.model_copy(update={"grounding": t.grounding.model_copy(update={"document": padded(
        t.grounding.document, words)})}) if t.role == "assistant" else t for t in dlg.turns]
    return dlg.model_copy(update={"turns": turns})


def per_call(verdict) -> float:
    total = verdict.usage.total
    return total.prompt_tokens / total.calls


def errors(verdict) -> list[str]:
    return [c.error for t in verdict.turns for c in t.claims if c.category.value == "ERROR"]


@pytest.fixture(scope="module")
def server_lm():
    with FakeOpenAIServer(context_tokens=CONTEXT) as server:
        yield ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False).build()


def judged(program, dlg, lm):
    with dspy.context(lm=lm, adapter=build_adapter("json")):
        return program(dlg)


@pytest.mark.parametrize("program", ["local", "seed"], ids=["default", "seed"])
def test_long_sources_fit_and_cost_what_their_deciding_passages_cost(program, server_lm):
    quickstart = load_dialogues(QUICKSTART)[0]
    judge = Vista.from_program(program)
    alone = judged(judge, quickstart, server_lm)
    assert not errors(alone) and alone.usage.total.calls > 0
    for words in (5_000, 20_000):
        long = judged(judge, with_sources(quickstart, words), server_lm)
        assert not errors(long), (words, errors(long))
        assert [t.label for t in long.turns] == [t.label for t in alone.turns]
        assert per_call(long) <= 1.5 * per_call(alone), (words, per_call(long), per_call(alone))


def test_the_full_reading_sends_every_word_and_so_does_not_fit(server_lm):
    quickstart = load_dialogues(QUICKSTART)[0]
    long = with_sources(quickstart, 5_000)
    verdict = judged(Vista.from_program("seed", evidence="full"), long, server_lm)
    assert errors(verdict) and all(e.startswith("the prompt does not fit the model's context (nothing was cut)")
                                   for e in errors(verdict))
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        Vista.from_program("seed", evidence="full")(long)
    references = {inputs["reference"] for inputs in engine.inputs_of("verify")}
    assert references == {t.grounding.document for t in long.turns if t.role == "assistant"}


def wow_like(judged_turns: int):
    """A dialogue of ``judged_turns`` assistant turns, each repeating a sentence of its own reference (so every
    claim is verified and joins the store) after a user question."""
    turns = []
    for k in range(judged_turns):
        reference = unrelated(k)
        sentence = reference.split("\n")[1].split(". ")[0] + "."
        turns += [user(f"Tell me about {_SUBJECTS[k % len(_SUBJECTS)].lower()}, please?"),
                  assistant(sentence, reference)]
    return dialogue(*turns, id=f"long-{judged_turns}")


@pytest.mark.parametrize("program", ["seed", "local"], ids=["seed", "default-prompts"])
def test_a_fifty_turn_dialogue_costs_per_call_at_most_half_again_a_five_turn_one(program):
    def per_call_of(n: int, reading: str) -> float:
        judge = Vista.from_program(program, evidence=reading)
        judge.rule = None  # the default's prompts with every unit asked (its cascade asks none of these)
        engine = RuleEngine()
        with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
            verdict = judge(wow_like(n))
        assert not errors(verdict)
        return per_call(verdict)

    assert per_call_of(50, "turn") <= 1.5 * per_call_of(5, "turn")
    assert per_call_of(50, "full") > 1.5 * per_call_of(5, "full")  # what the store and history cost without budgets


def test_a_claim_records_the_passages_and_store_claims_it_was_checked_against():
    reference = padded("Tromsø climate\nThe average January temperature in Tromsø is around minus 4 degrees Celsius.",
                       3_000)
    store = ["The user likes winter.", "Tromsø is in Norway.", "Tromsø has a cathedral.", "Basalt is a rock."] + [
        f"The user asked about topic number {k}." for k in range(60)]
    claim = "The average January temperature in Tromsø is around minus 4 degrees Celsius."
    dlg = dialogue(user("How cold is Tromsø?"), assistant(claim, reference), background=store)
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        verdict = Vista.from_program("seed")(dlg)
    [checked] = [c.checked_against for c in verdict.turns[0].claims]
    assert checked.reading == "turn"
    start = reference.index("Tromsø climate")
    assert checked.reference == [(start, start + len("Tromsø climate\n" + claim))]  # its paragraph, title and all
    assert checked.knowledge == [1, 2, 3]  # the store claim sharing most of it ("Tromsø") and its neighbours
    [inputs] = engine.inputs_of("verify")
    assert inputs["reference"] == f"{OMITTED}\nTromsø climate\n{claim}\n{OMITTED}"
    assert inputs["knowledge"] == "1. The user likes winter.\n2. Tromsø is in Norway.\n3. Tromsø has a cathedral."
    assert verdict.schema_version == 2


def test_every_claim_of_a_turn_reads_one_evidence_set_and_per_unit_reading_does_not():
    reference = padded("Tromsø\nTromsø is a city in Norway. It has an airport.\nTromsø has a cathedral made of wood.",
                       3_000)
    turn = "Tromsø is a city in Norway. Tromsø has a cathedral made of wood."
    for reading, distinct in (("turn", 1), ("unit", 2)):
        engine = RuleEngine()
        with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
            verdict = Vista.from_program("seed", evidence=reading)(dialogue(user("Tromsø?"), assistant(turn, reference)))
        prompts = {inputs["reference"] for inputs in engine.inputs_of("verify")}
        assert len(prompts) == distinct, reading
        assert all(tokens(p) < 100 for p in prompts)
        assert {c.category.value for c in verdict.turns[0].claims} == {"VERIFIED"}


def test_a_window_the_budget_cannot_hold_is_left_out_and_counted():
    reference = padded("Tromsø\nTromsø is a city in Norway.\nTromsø has a cathedral made of wood.", 3_000)
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        verdict = Vista.from_program("seed", evidence_tokens=15)(dialogue(user("Tromsø?"), assistant(
            "Tromsø is a city in Norway. Tromsø has a cathedral made of wood.", reference)))
    assert [c.checked_against.left_out for c in verdict.turns[0].claims] == [1, 1]
    assert len(verdict.turns[0].claims[0].checked_against.reference) == 1


def test_the_baselines_read_the_passages_that_decide():
    quickstart = with_sources(load_dialogues(QUICKSTART)[0], 5_000)
    for system, stage in ((FActScore(), "support"), (LLMJudge(), "judge")):
        engine = RuleEngine()
        with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
            system(quickstart)
        references = [inputs["reference"] for inputs in engine.inputs_of(stage)]
        assert references and all(tokens(r) <= 1024 and "Tromsø" in r for r in references), stage


def test_a_long_history_keeps_its_start_until_it_outgrows_the_budget():
    turns = [Turn(role="user" if k % 2 == 0 else "assistant", text=f"turn {k} " + "word " * 30,
                  grounding=None if k % 2 == 0 else Grounding.knowledge_only()) for k in range(40)]
    starts = [bounded_history(turns[:n], 512).splitlines()[0] for n in range(1, 41)]
    assert starts[:12] == [f"user: {turns[0].text}"] * 12  # all of it fits
    assert starts[12] == "(7 earlier turns not shown)" and starts[12:18] == [starts[12]] * 6  # then a fixed start
    assert all(tokens(bounded_history(turns[:n], 512)) <= 512 for n in range(1, 41))
    assert bounded_history(turns, None).count("\n") == 39  # the full reading: every turn


@pytest.mark.parametrize("reading", [None, "full"], ids=["default", "full"])
def test_vista_evaluate_records_the_reading_its_run_used(reading, tmp_path):
    out = tmp_path / "run"
    flag = ["--evidence", reading] if reading else []
    result = CliRunner().invoke(app, ["evaluate", str(QUICKSTART), "--system", "evidence", "--units", "sentences",
                                      "--out", str(out), *flag])  # the tier that asks no LM
    assert result.exit_code == 0, result.output
    used = reading or "turn"
    assert json.loads((out / "run.json").read_text())["evidence"] == used
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert verdicts and {v["options"]["evidence"] for v in verdicts} == {used}


def test_vista_benchmark_reads_every_system_with_the_reading_given_and_records_it(tmp_path, dev_file):
    out = tmp_path / "bench"
    with FakeOpenAIServer() as server:
        result = CliRunner().invoke(app, ["benchmark", "--datasets", f"vista-human={dev_file}", "--systems",
                                          "vista,judge", "--n", "1", "--evidence", "full", "--model", "openai/fake",
                                          "--api-base", server.url, "--out", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert [plan["evidence"] for plan in json.loads((out / "benchmark.json").read_text())["plans"]] == ["full"]
    for system in ("vista", "judge"):
        assert json.loads((out / "runs" / "vista-human" / system / "run.json").read_text())["evidence"] == "full"
    claims = [c for line in (out / "runs" / "vista-human" / "vista" / "verdicts.jsonl").read_text().splitlines()
              for t in json.loads(line)["turns"] for c in t["claims"] if c.get("checked_against")]
    assert claims and {c["checked_against"]["reading"] for c in claims} == {"full"}
