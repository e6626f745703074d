"""`vista compile --model M`: the one compile, end to end over HTTP with the fake OpenAI server on synthetic
dialogues whose outcome is known (the rule engine is right on every turn of them): the estimate before any call
(--dry-run makes none), the priced study, the pick, the gate against the seed, the test part read once, the program,
its meta and its card written into the user's programs folder, never into the package, and found by name."""

from __future__ import annotations

import json

import pytest
from helpers import vista_conversation
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.compiled.files import compiled_dir
from vista_dspy.lm.fake import FakeOpenAIServer


@pytest.fixture
def parts(tmp_path):
    """Six compile dialogues and four test dialogues, half hallucinated, each with its human claims."""
    compile_file, test_file = tmp_path / "compile.json", tmp_path / "test.json"
    compile_file.write_text(json.dumps([vista_conversation("wow", i) for i in range(6)]))
    test_file.write_text(json.dumps([vista_conversation("cmu", 100 + i) for i in range(4)]))
    return (["--compile-data", f"vista-human={compile_file}:all", "--test-data", f"vista-human={test_file}:all",
             "--pool-data", "none"])


def shipped_files() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in compiled_dir().iterdir()}


def test_dry_run_prints_the_estimate_and_makes_no_lm_call(parts):
    with FakeOpenAIServer() as server:
        done = CliRunner().invoke(app, ["compile", "--model", "openai/fake", "--api-base", server.url, "--trials", "3",
                                        "--dry-run", *parts])
        requests = server.requests
    assert done.exit_code == 0, done.output
    assert requests == 0
    # 3 trials x 6 compile turns + 2 x 4 test turns
    assert done.stdout.startswith("estimate: 26 judged turns, ") and "server's time per judged turn is unknown" in \
        done.stdout


def test_the_embedded_model_s_dry_run_needs_neither_its_weights_nor_its_server(parts, monkeypatch):
    import vista_dspy.cli.compile as compile_cli

    def no_model(*args, **kwargs):
        raise AssertionError("a model was set up")

    monkeypatch.setattr(compile_cli, "model_setup", no_model)
    done = CliRunner().invoke(app, ["compile", "--model", "local", "--trials", "2", "--dry-run", *parts])
    assert done.exit_code == 0, done.output
    # 2 trials x 6 compile turns + 2 x 4 test turns, at the seed's measured 14.97 s per judged turn on the 1.5B
    assert done.stdout.startswith("estimate: 20 judged turns, ") and "; 0.1 hours of server time" in done.stdout
    assert "14.97 s per judged turn on local" in done.stdout


def test_a_hosted_model_s_estimate_is_in_dollars_from_litellm_s_price_map(parts):
    done = CliRunner().invoke(app, ["compile", "--model", "openai/gpt-4o-mini", "--trials", "2", "--dry-run", *parts])
    assert done.exit_code == 0, done.output
    assert "; $" in done.stdout.splitlines()[0] and "litellm's price map for openai/gpt-4o-mini" in done.stdout


@pytest.mark.parametrize("logprobs", [True, False])
def test_compile_writes_program_meta_and_card_to_the_users_folder_and_it_is_found_by_name(parts, tmp_path,
                                                                                         monkeypatch, logprobs):
    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "mine"))
    before = shipped_files()
    with FakeOpenAIServer(logprobs=logprobs) as server:
        done = CliRunner().invoke(app, ["compile", "--model", "openai/fake", "--api-base", server.url, "--trials",
                                        "3", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--no-cache", *parts])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{tmp_path / 'mine' / 'openai_fake.json'}\n"
    assert " ".join(done.output.split()).count("s of server time") == 3  # the running cost, after each trial
    meta = json.loads((tmp_path / "mine" / "openai_fake.meta.json").read_text())
    # The rule engine is right on every turn: every trial ties with the seed, the cheapest of them is picked, passes.
    assert meta["gate"]["passed"] is True and meta["settings"]["trial"] != 0
    pooled = meta["test_part"]["datasets"]["pooled"]
    assert pooled["turns"] == 4 and pooled["seed"]["balanced_accuracy"] == pooled["compiled"]["balanced_accuracy"] == 1
    assert meta["fitted_on"] == {} and meta["settings"]["label_probabilities"] is logprobs
    card = (tmp_path / "mine" / "openai_fake.card.md").read_text()
    assert "## The test part, read once" in card and "| pooled | 4 | 1.000 | 1.000 |" in card
    assert "vista compile --model openai/fake" in card and (tmp_path / "mine" / "openai_fake.card.html").is_file()
    study = json.loads((tmp_path / "mine" / "openai_fake.study.json").read_text())  # the study's result beside them
    assert len(study["trials"]) == 3 and meta["settings"]["trial"] in [t["number"] for t in study["trials"]]
    # Without log-probabilities the program compiles all the same, and its card says what it decides by.
    assert ("gives no label probabilities (token log-probabilities): this program decides by the judge's labels"
            in card) is not logprobs
    assert shipped_files() == before  # nothing written under the package
    found = CliRunner().invoke(app, ["models"])
    assert found.exit_code == 0
    from vista_dspy import Vista

    assert Vista.for_model("openai/fake").program_name == "openai_fake"


def test_check_fitted_on_names_the_first_dialogue_of_the_test_part():
    from vista_dspy.data.suite import part_of_group
    from vista_dspy.optimize.compile import FittedOnTestPart, check_fitted_on

    assert [part_of_group(i) for i in ("d0", "d1", "d3")] == ["compile", "test", "compile"]  # the hash's split
    check_fitted_on({"program": "p", "fitted_on": {"vista-human": ["d0", "d3"]}})  # compile part only: fine
    with pytest.raises(FittedOnTestPart, match="p was fitted on vista-human dialogue d1, which lies in the suite's "
                                               "test part"):
        check_fitted_on({"program": "p", "fitted_on": {"vista-human": ["d0", "d1"]}})
    # Rows that share a conversation are split by it: d1 of a compile-part conversation is on the compile side, d0
    # of a test-part conversation on the test side.
    assert (part_of_group("fade:c1"), part_of_group("fade:c0")) == ("compile", "test")
    check_fitted_on({"fitted_on": {"fade": ["d1"]}}, {"d1": {"dataset": "fade", "dialogue_id": "c1"}})
    with pytest.raises(FittedOnTestPart, match="fade dialogue d0"):
        check_fitted_on({"fitted_on": {"fade": ["d0"]}}, {"d0": {"dataset": "fade", "dialogue_id": "c0"}})


def test_the_demo_pool_is_built_only_when_a_trial_reads_it():
    from vista_dspy.optimize.demos import LazyPool, Pool

    built = []

    def build():
        built.append(True)
        pool = Pool()
        import dspy

        pool.add("verify", "VERIFIED", dspy.Example(claim="c"), "d0")
        return pool

    lazy = LazyPool(build)
    assert lazy.offers("decompose") and lazy.offers("verify") and not built  # offered before any call
    assert lazy.pick({"verify": 1}, 0)["verify"][0].claim == "c" and built == [True]
    lazy.pick({"verify": 1}, 1)
    assert built == [True] and not lazy.offers("decompose")  # built once; now it offers what it holds


def test_a_study_whose_trials_read_no_pool_makes_no_pool_call(tmp_path, parts):
    """A study over a pool none of whose trials reads it (here the seed alone): no pool call, no pool record."""
    from vista_dspy.optimize.study.result import StudyResult

    requests = {}
    for pool in (parts[3], "none"):  # a pool of the test file's dialogues, or none at all
        with FakeOpenAIServer() as server:
            done = CliRunner().invoke(app, ["study", "--model", "openai/fake", "--api-base", server.url, "--dev",
                                            parts[1], "--train", pool, "--trials", "1", "--no-designs", "--storage",
                                            f"sqlite:///{tmp_path / (pool[:4] + '.db')}", "--no-cache", "--export",
                                            str(tmp_path / "r.json")])
            requests[pool] = server.requests
        assert done.exit_code == 0, done.output
        assert "demo pool" not in done.output and StudyResult.load(tmp_path / "r.json").pool is None
    assert requests[parts[3]] == requests["none"] > 0  # the unread pool cost no call


def test_vista_models_lists_the_users_and_the_shipped_programs_with_their_cards_headline(tmp_path, monkeypatch):
    from vista_dspy import Vista

    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "mine"))
    Vista.from_program(None).save_program(tmp_path / "mine" / "mine.json")
    (tmp_path / "mine" / "mine.meta.json").write_text(json.dumps({
        "program": "mine", "optimizer": "study", "cost": {"per_judged_turn": 1.5, "unit": "s per judged turn (x)"},
        "test_part": {"datasets": {"pooled": {"turns": 4, "seed": {"balanced_accuracy": 0.5},
                                              "compiled": {"balanced_accuracy": 0.75}}}}}))
    import io

    from rich.console import Console

    from vista_dspy.cli.models import programs_table

    done = CliRunner().invoke(app, ["models"])
    assert done.exit_code == 0, done.output
    out = io.StringIO()
    Console(file=out, width=400).print(programs_table())
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in out.getvalue().splitlines() if line.count("│") > 3}
    assert rows["mine"] == [str(tmp_path / "mine"), "-", "test bal. acc. 0.750 vs seed 0.500; 1.5 s per judged turn"]
    assert rows["seed"][0] == "shipped" and rows["local"][0] == "shipped"



def test_the_test_part_reads_the_seed_from_its_recorded_anchor_only_when_it_is_this_seed_s(tmp_path):
    """The anchor's record says the seed got every test turn wrong, at 2 s each; judged live, the rule engine gets every
    one right. Read from a record of this seed, the seed's side is the record's and only the chosen program is asked
    (half the calls); a record of another program is not used."""
    import dspy

    from vista_dspy import Vista
    from vista_dspy.data import load_dialogues
    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.optimize.compile import Anchor, judge_test_part
    from vista_dspy.optimize.metrics import SERVER_TIME
    from vista_dspy.optimize.study import ObjectiveData

    path = tmp_path / "test.json"
    path.write_text(json.dumps([vista_conversation("cmu", 100 + i) for i in range(4)]))
    data = ObjectiveData.of("test", {"vista-human": load_dialogues(path)})
    seed = Vista.from_program(None)
    wrong = {"hallucinated": "f", "faithful": "h"}
    turns = {(did, index): (wrong[gold], 2.0) for _, did, index, gold in data.turns}
    records, requests = [], []
    for program_hash in (seed.content_hash(), "0" * 64):
        with FakeOpenAIServer() as server:
            config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
            with dspy.context(lm=config.build(), adapter=config.build_adapter()):
                records.append(judge_test_part(seed, seed, data, SERVER_TIME,
                                               anchor=Anchor("record X", program_hash, "time", turns)))
            requests.append(server.requests)
    anchored, foreign = (r["datasets"]["pooled"] for r in records)
    assert anchored["compiled"]["balanced_accuracy"] == foreign["compiled"]["balanced_accuracy"] == 1.0
    assert anchored["seed"]["balanced_accuracy"] == 0.0 and records[0]["cost"]["seed"] == 2.0
    assert records[0]["seed_source"].startswith("the anchor's record (record X")
    assert foreign["seed"]["balanced_accuracy"] == 1.0 and records[1]["seed_source"] == "judged by this compile"
    assert requests[0] > 0 and requests[1] == 2 * requests[0]
