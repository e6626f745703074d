"""A compiled program is one typed thing: the judging options record, the program file (demos, options,
decision rule) identified by its content, applied the same way by every entry point; the runner's backends; the
gate on constructed data."""

import json

import dspy
import pytest
from helpers import assistant, dialogue, user
from typer.testing import CliRunner

from vista_dspy import DecisionRule, JudgeOptions, Vista
from vista_dspy.cli import app
from vista_dspy.compiled.files import read_program
from vista_dspy.data import load_dialogues
from vista_dspy.experiments.bench import ABLATIONS, Plan, build_system, run_benchmark
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.lm.models import ModelConfig
from vista_dspy.options import FLAG_NAMES, NOT_SAVED, from_flags
from vista_dspy.run.runner import LATER_SETTINGS, RENAMED_SETTINGS, Concurrent, RunConflict, Threads, evaluate

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
DLG = dialogue(user("Tell me about Lisbon."), assistant("Lisbon is the capital of Portugal. Lisbon has ten hills.", DOC))


def saved_batched_program(path, **options):
    """The seed program with other demos and options, saved as a program file."""
    program = Vista.from_program(None, claim_calls="batched", use_context=True, **options)
    program.verify.demos = program.verify.demos[:2]
    return program.save_program(path)


# ---- the options record -----------------------------------------------------------------------------------------
def test_options_are_validated_once_and_in_one_vocabulary():
    options = JudgeOptions(reasoning="categorize,verify")
    assert options.reasoning == ("verify", "categorize")  # stage order, whatever the order given
    with pytest.raises(ValueError, match="unknown judging option context"):
        options.replace(context=True)  # the CLI's name is not the option's
    with pytest.raises(ValueError, match="history_in_decompose"):
        JudgeOptions(decompose_calls="per-dialogue", history_in_decompose=False)
    with pytest.raises(ValueError, match="frozen"):
        options.use_context = True  # changed only through replace
    assert from_flags(context=True, history=None, judge_given_claims=True) == {"use_context": True,
                                                                               "given_claims": True}
    assert set(FLAG_NAMES.values()) <= set(JudgeOptions.model_fields)
    assert not set(NOT_SAVED) & set(options.saved())
    for changes in ABLATIONS.values():  # the benchmark's ablations speak the same vocabulary
        assert set(changes) <= set(JudgeOptions.model_fields)
    assert set(LATER_SETTINGS) <= set(JudgeOptions.model_fields)  # and so does the runner's settings check
    assert set(RENAMED_SETTINGS.values()) <= set(JudgeOptions.model_fields)


def test_the_constructor_validates_through_the_record():
    assert Vista(use_context=True).options.use_context
    with pytest.raises(ValueError, match="unknown judging option"):
        Vista(use_ctx=True)
    judge = Vista()
    other = judge.with_options(claim_calls="joint")
    assert judge.options.claim_calls == "per-claim" and other.options.claim_calls == "joint"


# ---- the program file -------------------------------------------------------------------------------------------
def evidence_rule(threshold=0.5):
    from vista_dspy.decision import CLASSES, LinearModel

    coef = tuple((4.0,) if c == "LACKING EVIDENCE" else (0.0,) for c in CLASSES)
    return DecisionRule(evidence=LinearModel(features=("uncovered_reference",), coef=coef,
                                             intercept=(0.0, -9.0, -9.0, -2.0), threshold=threshold))


def test_a_program_file_holds_demos_options_and_the_rule_and_round_trips(tmp_path):
    program = Vista.from_program(None, claim_calls="batched")
    program.rule = evidence_rule(0.3)
    path = program.save_program(tmp_path / "p.json")
    section = json.loads(path.read_text())["vista"]
    assert section["options"]["claim_calls"] == "batched" and section["rule"]["evidence"]["threshold"] == 0.3
    assert not set(NOT_SAVED) & set(section["options"])
    loaded = Vista.from_program(path)
    assert loaded.options == program.options and loaded.rule == program.rule
    assert loaded.content_hash() == program.content_hash() == read_program(path).content_hash
    assert [dict(d) for d in loaded.verify.demos] == [dict(d) for d in program.verify.demos]


def test_the_content_hash_follows_demos_options_and_the_rule():
    seed = Vista.from_program(None)
    fewer = seed.deepcopy()
    fewer.verify.demos = fewer.verify.demos[:1]
    calibrated = seed.deepcopy()
    calibrated.rule = evidence_rule(0.4)
    hashes = {seed.content_hash(), fewer.content_hash(), seed.with_options(use_context=True).content_hash(),
              calibrated.content_hash()}
    assert len(hashes) == 4
    # Run modes and the endpoint's settings do not change what the program is.
    assert seed.with_options(given_claims=True, short_answer_tokens=9).content_hash() == seed.content_hash()


def test_a_program_file_from_before_options_were_saved_takes_them_from_its_meta(tmp_path):
    state = Vista.from_program(None).dump_state()
    (tmp_path / "old.json").write_text(json.dumps(state))
    (tmp_path / "old.meta.json").write_text(json.dumps({"options": {"use_context": True, "claim_calls": "batched"}}))
    old = Vista.from_program(tmp_path / "old.json")
    assert old.options.use_context and old.options.claim_calls == "batched" and old.rule is None


def test_a_program_is_found_by_name_in_the_users_folder_first_then_among_the_shipped(tmp_path, monkeypatch):
    from vista_dspy.compiled.files import compiled_dir, program_path, programs_dir, saved_programs
    from vista_dspy.lm.models import program_for_model

    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "mine"))
    assert programs_dir() == tmp_path / "mine"
    assert program_path("local") == ("local", compiled_dir() / "local.json")  # nothing of the user's yet
    assert program_for_model("openai/my-model") == "seed"
    saved_batched_program(tmp_path / "mine" / "local.json")
    saved_batched_program(tmp_path / "mine" / "openai_my-model.json")
    assert program_path("local") == ("local", tmp_path / "mine" / "local.json")  # the user's hides the shipped
    assert Vista.for_model("openai/my-model").options.claim_calls == "batched"
    listed = dict(saved_programs())
    assert listed["local"] == tmp_path / "mine" / "local.json" and listed["seed"] == compiled_dir() / "seed.json"
    with pytest.raises(FileNotFoundError, match="nor nowhere.json in .*mine"):
        program_path("nowhere")


def test_the_users_programs_live_in_the_user_data_folder_unless_vista_programs_says(monkeypatch, tmp_path):
    from vista_dspy.compiled.files import compiled_dir, programs_dir

    monkeypatch.delenv("VISTA_PROGRAMS")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr("sys.platform", "linux")
    assert programs_dir() == tmp_path / "data" / "vista-dspy" / "programs"
    assert not programs_dir().is_relative_to(compiled_dir().parent)


def test_from_program_applies_saved_options_and_a_change_wins(tmp_path):
    path = saved_batched_program(tmp_path / "p.json")
    judge = Vista.from_program(path)
    assert judge.options.claim_calls == "batched" and judge.options.use_context and len(judge.verify.demos) == 2
    assert Vista.from_program(path, claim_calls="per-claim").options.claim_calls == "per-claim"


def test_vista_benchmark_applies_a_programs_saved_options(tmp_path, dev_file):
    path = saved_batched_program(tmp_path / "p.json")
    assert build_system("vista", program=str(path)).options.claim_calls == "batched"
    assert build_system("vista-no-ac", program=str(path)).options.use_context  # the ablation changes only -AC
    engine = RuleEngine()
    plan = Plan(datasets={"vista-human": dev_file}, systems=["vista"], n=2, seed=0, model="fake/rules",
                program=str(path))
    result = run_benchmark(plan, Threads(rule_lm(engine), dspy.JSONAdapter()), tmp_path / "bench")
    [run] = result.runs.values()
    assert all(v.options["claim_calls"] == "batched" and v.options["use_context"] for v in run.verdicts)
    assert engine.inputs_of("verify_batch") and not engine.inputs_of("verify")


def test_a_program_saved_in_batched_mode_is_judged_batched_by_vista_evaluate(tmp_path, dev_file):
    path = saved_batched_program(tmp_path / "batched-model.json")
    assert read_program(path).options["claim_calls"] == "batched"
    with FakeOpenAIServer() as server:
        out = CliRunner().invoke(app, ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base",
                                       server.url, "--program", str(path), "--limit", "2", "--out",
                                       str(tmp_path / "run"), "--no-cache"])
        assert out.exit_code == 0, out.output
        assert server.engine.inputs_of("verify_batch") and not server.engine.inputs_of("verify")
    assert "claim_calls=batched" in " ".join(out.output.split())
    verdicts = [json.loads(line) for line in (tmp_path / "run" / "verdicts.jsonl").read_text().splitlines()]
    assert {v["options"]["claim_calls"] for v in verdicts} == {"batched"}


def test_a_flag_wins_over_a_saved_option_and_is_recorded(tmp_path, dev_file):
    path = saved_batched_program(tmp_path / "p.json")
    with FakeOpenAIServer() as server:
        out = CliRunner().invoke(app, ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base",
                                       server.url, "--program", str(path), "--limit", "1", "--claim-calls",
                                       "per-claim", "--out", str(tmp_path / "run"), "--no-cache"])
        assert out.exit_code == 0, out.output
        assert server.engine.inputs_of("verify") and not server.engine.inputs_of("verify_batch")
    assert "flags override program" in " ".join(out.output.split())
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["claim_calls"] == "per-claim" and run["use_context"] is True


def test_a_programs_saved_adapter_is_the_one_a_run_formats_prompts_with(tmp_path, dev_file):
    path = Vista.from_program(None, adapter="chat").save_program(tmp_path / "chatty.json")
    common = ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--program", str(path), "--limit", "1",
              "--no-cache"]
    with FakeOpenAIServer() as server:
        saved = CliRunner().invoke(app, [*common, "--api-base", server.url, "--out", str(tmp_path / "a")])
        chat_prompts = list(server.prompts)
        flagged = CliRunner().invoke(app, [*common, "--api-base", server.url, "--out", str(tmp_path / "b"),
                                           "--adapter", "json"])
        json_prompts = server.prompts[len(chat_prompts):]
    assert saved.exit_code == 0 and flagged.exit_code == 0, saved.output + flagged.output
    assert "applies its saved adapter: chat" in " ".join(saved.output.split())
    assert any("[[ ## completed ## ]]" in p for p in chat_prompts)  # the chat adapter's request format
    assert not any("[[ ## completed ## ]]" in p for p in json_prompts)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["adapter"] == "chat"


def test_a_recompiled_program_under_the_same_name_does_not_resume_an_old_run(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:3]
    path = saved_batched_program(tmp_path / "local.json")
    first = Vista.from_program(path)
    evaluate(dialogues[:1], first, rule_lm(), out_dir=tmp_path / "run", settings={"model": "m"})
    recompiled = Vista.from_program(path)
    recompiled.verify.demos = recompiled.verify.demos[:1]
    recompiled.save_program(path)  # same name, other content
    with pytest.raises(RunConflict, match=r"program '.*local\.json' of other content"):
        evaluate(dialogues, Vista.from_program(path), rule_lm(), out_dir=tmp_path / "run", settings={"model": "m"})
    resumed = evaluate(dialogues, first, rule_lm(), out_dir=tmp_path / "run", settings={"model": "m"})
    assert resumed.resumed == 1  # the same content resumes


@pytest.mark.ray
def test_a_ray_worker_judges_with_the_in_memory_program_it_was_given(tmp_path, dev_file):
    ray = pytest.importorskip("ray")
    import os

    from vista_dspy.run.distributed import RayBackend

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    dialogues = load_dialogues(dev_file)[:4]
    program = Vista.from_program(None, use_context=True)
    program.verify.demos = []  # never saved: a worker that reloads the seed by name would show six demos
    program.program_name = "trial-7"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # installed but unable to start: a failure
    try:
        with FakeOpenAIServer() as server:
            config = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False)
            local = evaluate(dialogues, program, Threads(config.build()))
            local_messages = list(server.engine.message_counts)
            remote = evaluate(dialogues, program, RayBackend(config, workers=1))
            remote_messages = server.engine.message_counts[len(local_messages):]
    finally:
        ray.shutdown()
    assert [v.model_dump(exclude={"usage"}) for v in remote.verdicts] == \
        [v.model_dump(exclude={"usage"}) for v in local.verdicts]
    assert sorted(remote_messages) == sorted(local_messages)
    assert {v.program for v in remote.verdicts} == {"trial-7"}


# ---- the runner's backends -------------------------------------------------------------------------------------
def test_a_backend_takes_only_what_applies_to_it(dev_file):
    dialogues = load_dialogues(dev_file)[:3]
    with pytest.raises(TypeError):
        Threads(rule_lm(), concurrency=4)  # the threaded backend has no request bound
    threaded = evaluate(dialogues, Vista.from_program(None), Threads(rule_lm(), threads=2))
    concurrent = evaluate(dialogues, Vista.from_program(None), Concurrent(rule_lm(), requests=4))
    assert [v.model_dump(exclude={"usage"}) for v in threaded.verdicts] == \
        [v.model_dump(exclude={"usage"}) for v in concurrent.verdicts]


# ---- the claim decision, one rule in every mode -----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["per-claim", "batched", "joint"])
def test_categorize_all_asks_about_verified_claims_without_changing_a_verdict(mode):
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        plain = Vista(claim_calls=mode)(DLG)
        probed = Vista(claim_calls=mode, categorize_all=True)(DLG)
    assert [c.category for c in probed.turns[0].claims] == [c.category for c in plain.turns[0].claims]
    asked = [i["claim"] for i in engine.inputs_of("categorize")]
    asked += [line.split(". ", 1)[1] for i in engine.inputs_of("categorize_batch") for line in i["claims"].splitlines()]
    assert "Lisbon is the capital of Portugal." in asked  # verified, and asked anyway


# ---- the one gate on constructed decisions ----------------------------------------------------------------------
def _judged(labels: list[str], gold: list[str]) -> list:
    """One turn of one claim per dialogue: the judge's label of its claim and the turn's gold label (the claim's
    annotators' judgement agrees with the turn), decided as the seed decides (the judge's own labels)."""
    from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
    from vista_dspy.optimize.rules.rule_fitting import replay

    unsafe = {"hallucinated": "LACKING EVIDENCE", "faithful": "VERIFIED"}
    return replay([TurnRows(f"d{i}", 1, g, [ClaimRow(f"claim of d{i}", {}, None, None, unsafe[label], unsafe[g])])
                   for i, (label, g) in enumerate(zip(labels, gold))], None)


def test_a_rule_fitted_on_a_probe_is_gated_by_the_one_gate_against_the_seed_s_recorded_decisions():
    from vista_dspy.optimize.rules.recipes import probe_gate

    gold = ["hallucinated", "faithful"] * 20  # 40 dialogues of one turn each
    right = list(gold)
    # The seed misses every other hallucinated turn (10 of 40): the candidate, right on all, wins outright.
    seed = [("faithful" if g == "hallucinated" and i % 4 == 0 else g) for i, g in enumerate(gold)]
    verdict = probe_gate(_judged(right, gold), _judged(seed, gold), name="refitted")
    assert verdict.passed and verdict.wins
    assert verdict.turns["candidate"] == 1.0 and verdict.turns["seed"] == 0.75 and verdict.turns["dialogues"] == 40
    assert verdict.claims is not None and verdict.claims["claims"] == 40 and verdict.claims_not_worse
    # Swapped: the candidate loses those ten turns, far beyond the 1-point margin, and its claims with them.
    lost = probe_gate(_judged(seed, gold), _judged(right, gold))
    assert not lost.passed and not lost.turns_non_inferior and not lost.claims_not_worse
    assert lost.describe()[-1].startswith("gate against the seed (paired bootstrap over dialogues): failed")
    # The same decisions as the seed: a difference of exactly 0 is non-inferior, and no win.
    tie = probe_gate(_judged(seed, gold), _judged(seed, gold))
    assert tie.passed and not tie.wins and tie.turns["difference"] == 0


def test_the_probe_gate_pairs_only_the_turns_both_decided_and_claims_by_their_text():
    from vista_dspy.optimize.rules.recipes import probe_gate

    gold = ["hallucinated", "faithful"] * 10
    candidate, seed = _judged(gold, gold), _judged(gold, gold)[:12]  # the seed's probe holds 12 of the 20 turns
    for d in candidate:  # the candidate judged other units (e.g. sentences): no claim text in common
        d.turn.rows[0] = type(d.turn.rows[0])("another unit", {}, None, None, "VERIFIED", "VERIFIED")
    verdict = probe_gate(candidate, seed)
    assert verdict.turns["turns"] == 12 and verdict.turns["dialogues"] == 12
    assert verdict.claims is None and verdict.passed  # claims not compared: none paired
