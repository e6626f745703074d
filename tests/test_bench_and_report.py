"""`vista benchmark` and `vista report`: tables against hand-computed values, a small benchmark end to end with a
fake LM (resume included), the HTML report, and a real headless-Chromium render of it."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import dspy
import pandas as pd
import pytest
from conftest import SHARED_DATA
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.experiments.bench import Plan, build_system, parse_datasets, run_benchmark, system_names
from vista_dspy.experiments.report import build_report, screenshot
from vista_dspy.experiments.tables import abstention_table, accuracy_table, contradiction_table, markdown
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.program import Vista
from vista_dspy.run.runner import Threads

runner = CliRunner()


def frame(rows, **columns):
    base = {"expected": None, "claims": 1, "abstention": False, "contradicted": False, "calls": 1.0}
    return pd.DataFrame([{**base, **columns, **row} for row in rows])


def test_accuracy_table_matches_hand_computed_values_and_mcnemar(tmp_path):
    gold = ["hallucinated"] * 6 + ["faithful"] * 4
    vista = gold[:]  # all right
    judge = ["faithful"] * 6 + ["faithful", "faithful", "faithful", "unknown"]  # 6 halluc. missed, 1 unknown
    rows = [{"dataset": "d", "system": s, "dialogue_id": f"x{i}", "turn_index": 1, "label": p, "gold_label": g}
            for s, labels in (("vista", vista), ("judge", judge)) for i, (p, g) in enumerate(zip(labels, gold))]
    table = accuracy_table(frame(rows), tmp_path).set_index("system")
    assert table.loc["vista", "accuracy"] == 1.0 and table.loc["vista", "vs_vista"] == ""
    assert table.loc["judge", "accuracy"] == pytest.approx(0.3)  # 3 of 10; the unknown counts wrong
    assert table.loc["judge", "accuracy_excl_unknown"] == pytest.approx(3 / 9)
    assert table.loc["judge", "f1_h"] == 0.0 and table.loc["judge", "always_h"] == pytest.approx(0.6)
    # 7 discordant pairs, all favouring vista: exact two-sided p = 2 * 0.5**7.
    assert table.loc["judge", "vs_vista_p"] == pytest.approx(2 * 0.5 ** 7)
    assert table.loc["judge", "vs_vista"] == "*"
    text = markdown({"accuracy": table.reset_index()})
    assert "30.0*" in text and "McNemar" in text


def test_abstention_and_contradiction_tables():
    rows = [
        {"dataset": "coconot", "system": "vista", "dialogue_id": "r1", "expected": "abstention", "abstention": True,
         "label": "faithful"},
        {"dataset": "coconot", "system": "vista", "dialogue_id": "r2", "expected": "abstention", "abstention": False,
         "label": "hallucinated"},
        {"dataset": "coconot", "system": "vista", "dialogue_id": "c1", "expected": "compliant", "abstention": False,
         "label": "faithful"},
        {"dataset": "coconot", "system": "judge", "dialogue_id": "r1", "expected": "abstention", "label": "faithful"},
    ]
    table = abstention_table(frame(rows, turn_index=1, gold_label=None)).set_index("system")
    assert table.loc["vista", "abstention_accuracy"] == pytest.approx(2 / 3)
    assert table.loc["vista", "refusals_with_abstention"] == 0.5
    assert table.loc["vista", "compliant_with_abstention"] == 0.0
    assert pd.isna(table.loc["judge", "abstention_accuracy"])  # no categories, no abstention rate
    assert table.loc["judge", "refusals_judged_faithful"] == 1.0

    rows = [{"dataset": "rgm-contradictions", "system": "vista", "dialogue_id": str(i), "turn_index": 3,
             "gold_label": g, "label": p, "contradicted": c}
            for i, (g, p, c) in enumerate([("hallucinated", "hallucinated", True), ("hallucinated", "faithful", False),
                                           ("faithful", "hallucinated", False), ("faithful", "faithful", False)])]
    table = contradiction_table(frame(rows)).iloc[0]
    assert table["f1_turn_label"] == pytest.approx(0.5)  # P 1/2, R 1/2
    assert table["f1_contradicted_claim"] == pytest.approx(2 / 3)  # P 1, R 1/2


def test_plan_parsing_and_systems(tmp_path):
    (tmp_path / "begin").mkdir()  # a dataset found nowhere is refused ("run `vista data get begin`")
    assert parse_datasets("begin, fade=/x.csv", tmp_path) == {"begin": tmp_path / "begin", "fade": Path("/x.csv")}
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        parse_datasets("nope", tmp_path)
    assert system_names(["vista", "judge"], ["no-ac", "zero-shot"]) == ["vista", "judge", "vista-no-ac",
                                                                        "vista-zero-shot"]
    with pytest.raises(ValueError, match="unknown system or ablation"):
        system_names(["vista"], ["no-such"])
    ablated = build_system("vista-no-history")
    assert isinstance(ablated, Vista) and ablated.options.history_in_decompose is False
    assert ablated.options.accumulate is True
    assert build_system("vista-ctx").options.use_context is True
    cheapest = build_system("vista-batched-dialogue")
    assert (cheapest.options.claim_calls, cheapest.options.decompose_calls) == ("batched", "per-dialogue")
    assert build_system("factscore-nosplit").program_name == "factscore-nosplit"


@pytest.fixture
def data_dir():
    for name in ("begin", "coconot", "rgm_contradiction"):
        if not (SHARED_DATA / name).exists():
            pytest.skip(f"benchmark data not found at {SHARED_DATA / name}")
    return SHARED_DATA


def test_small_benchmark_end_to_end_with_a_fake_lm(tmp_path, data_dir):
    out = tmp_path / "bench"
    plan = Plan(datasets=parse_datasets("begin,coconot,rgm-contradictions", data_dir),
                systems=system_names(["vista", "vista-ctx", "factscore", "judge"], ["no-ac"]), n=4, seed=1,
                model="fake/rules")
    engine = RuleEngine()
    result = run_benchmark(plan, Threads(rule_lm(engine), dspy.JSONAdapter()), out)
    assert not result.interrupted and len(result.runs) == 15
    accuracy = result.tables["accuracy"]
    # Rows: the two labelled datasets x five systems, each over the same 4 turns; p-values for all but vista.
    assert len(accuracy) == 10 and set(accuracy["turns"]) == {4}
    assert accuracy[accuracy["system"] != "vista"]["vs_vista_p"].notna().all()
    assert set(result.tables["abstention"]["system"]) == set(plan.systems)
    assert len(result.tables["contradiction"]) == 5
    for name in ("table.csv", "table.md", "abstention.csv", "contradiction.csv", "benchmark.json"):
        assert (out / name).exists(), name
    document = json.loads((out / "benchmark.json").read_text())
    assert document["plans"][0]["n"] == 4 and len(document["tables"]["accuracy"]) == 10
    # What the loaders left out is in the record, the table and its notes (begin's "Generic" rows have no label).
    assert document["loaded"]["begin"] == {"kept": 3601, "skipped": {"Generic label": 6}, "sampled": 4}
    assert document["loaded"]["rgm-contradictions"]["skipped"] == {}
    assert dict(zip(accuracy["dataset"], accuracy["skipped_rows"])) == {"begin": 6, "rgm-contradictions": 0}
    notes = (out / "table.md").read_text()
    assert "- begin: 6 of 3607 rows skipped (Generic label: 6)" in notes
    assert "- coconot: 9 of 1928 rows skipped (not a refusal (is_refusal false): 8, missing response: 1)" in notes
    # Every system of a dataset judged the same sample.
    ids = {(d, s): [v.dialogue_id for v in r.verdicts] for (d, s), r in result.runs.items()}
    assert ids["begin", "vista"] == ids["begin", "judge"] == ids["begin", "vista-no-ac"]

    calls = len(engine.requests)
    again = run_benchmark(plan, Threads(rule_lm(engine), dspy.JSONAdapter()), out)
    assert len(engine.requests) == calls  # everything resumed, nothing re-asked
    assert all(r.resumed == 4 for r in again.runs.values())
    pd.testing.assert_frame_equal(again.tables["accuracy"].drop(columns="seconds_per_dialogue"),
                                  accuracy.drop(columns="seconds_per_dialogue"))

    html = build_report(out)
    assert html.count('<details class="turn"') == 15 * 4
    assert html.count("<svg") >= 3 and "Turn accuracy" in html and "Abstention (CoCoNot)" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html) and "<link" not in html  # self-contained


def test_cli_benchmark_and_report_over_http(tmp_path, data_dir):
    out = tmp_path / "b"
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["benchmark", "--datasets", "begin", "--systems", "vista,judge", "--n", "2",
                                     "--model", "openai/fake", "--api-base", server.url, "--data-dir",
                                     str(data_dir), "--out", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "## Turn accuracy" in result.stdout and "| begin" in result.stdout
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0 and (out / "report.html").exists()
    # A single `vista evaluate` directory is a report source too.
    result = runner.invoke(app, ["report", str(out / "runs" / "begin" / "judge"), "--out", str(tmp_path / "j.html")])
    assert result.exit_code == 0 and "begin / judge" in (tmp_path / "j.html").read_text()
    result = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such directory" in result.output
    result = runner.invoke(app, ["benchmark", "--datasets", "begin", "--ablations", "bogus", "-m", "openai/x"])
    assert result.exit_code == 2 and "unknown system or ablation bogus" in result.output


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (.ci/run installs Debian's chromium)")
def test_report_renders_in_headless_chromium(tmp_path, data_dir):
    import matplotlib.image

    out = tmp_path / "bench"
    plan = Plan(datasets=parse_datasets("begin", data_dir), systems=["vista", "judge"], n=3, model="fake/rules")
    run_benchmark(plan, Threads(rule_lm(RuleEngine()), dspy.JSONAdapter()), out)
    page = out / "report.html"
    page.write_text(build_report(out))
    png = screenshot(page, tmp_path / "shot.png", width=1000, height=1400)
    pixels = matplotlib.image.imread(png)
    assert pixels.shape[:2] == (1400, 1000) and pixels[..., :3].std() > 0.05  # not a blank page
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "showing 6 of 6 turns" in dom  # the page's script ran


def test_report_shows_dropped_claims_empty_decompositions_and_passages(tmp_path, dev_file):
    from vista_dspy.data import load_dialogues
    from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts, write_verdicts

    out = tmp_path / "run"
    dialogue = load_dialogues(dev_file)[0]
    evaluate([dialogue], Vista.from_program(None), Threads(rule_lm(RuleEngine()), dspy.JSONAdapter()), out_dir=out)
    [verdict] = read_verdicts(out / VERDICTS)
    verdict.turns[0].ungrounded = ["Hayao Miyazaki directed Spirited Away."]
    verdict.turns[0].empty_decomposition = True
    verdict.turns[0].passages = ["Spirited Away is a film.", "It won an Oscar."]
    verdict.turns.append(verdict.turns[0].model_copy(update={"passages": [], "turn_index": 99}))
    write_verdicts(out / VERDICTS, [verdict])
    html = build_report(out)
    assert '2 passages:</p>\n  <div class="doc passages">[1] Spirited Away is a film.\n[2] It won an Oscar.\n' in html
    assert "no reference: judged against the knowledge store alone" in html
    assert "dropped, not in the turn (ungrounded): “Hayao Miyazaki directed Spirited Away.”" in html
    assert "no claim was extracted from this turn" in html
