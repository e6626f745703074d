"""benchmarks/RESULTS.md is what the committed records give: every marked table (and README's headline) regenerated
by benchmarks/results.py byte for byte, the same tables drawn as one page, every script of benchmarks/ named there,
links into it that resolve, and records that are small and name no machine's paths."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "RESULTS.md"


@pytest.fixture(scope="module")
def results():
    spec = importlib.util.spec_from_file_location("benchmarks_results", BENCHMARKS / "results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tables(results):
    return results.all_tables()


def test_every_table_of_results_and_readme_is_what_the_records_give(results, tables):
    for document in results.DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        rewritten, changed = results.rewrite(text, tables)
        assert changed == [], f"{document.name}: run python benchmarks/results.py ({', '.join(changed)} out of date)"
        assert rewritten == text
    marked = {m["name"] for d in results.DOCUMENTS for m in results.MARKER.finditer(d.read_text(encoding="utf-8"))}
    assert set(tables) <= marked, f"tables no document shows: {sorted(set(tables) - marked)}"
    assert "headline" in {m["name"] for m in results.MARKER.finditer((REPO / "README.md").read_text())}


def test_a_table_that_differs_from_the_records_is_named(results, tables):
    text = RESULTS.read_text(encoding="utf-8").replace("| **pooled** (341) |", "| **pooled** (340) |", 1)
    _, changed = results.rewrite(text, tables)
    assert changed == ["compile-datasets"]


def test_results_is_at_most_400_lines():
    assert len(RESULTS.read_text(encoding="utf-8").splitlines()) <= 400


def test_the_default_record_is_the_shipped_programs(results):
    meta = json.loads((results.COMPILED / "local.meta.json").read_text())
    gate = meta.get("anchored_gate")
    if gate is None:
        pytest.skip("the shipped program's meta records no anchored gate")
    assert results.RECORDS["default"] == f"suite-{gate['candidate']}", (
        "the shipped program was gated on another record: change RECORDS['default'] in benchmarks/results.py")
    probe = json.loads((results.PROBES / results.RECORDS["default"] / "probe.json").read_text())
    assert probe["program_sha256"] == meta["program_sha256"]


def test_the_tables_render_as_one_page(results, tables):
    from markupsafe import escape

    page = results.html_page(tables)
    assert page.count("<table") == len(tables)
    for table in tables.values():
        assert str(escape(table.title[1:])) in page
    assert "**" not in page and "<strong>" in page
    assert "0.725 (0.677-0.772)" in page  # the default's compile balanced accuracy, as in RESULTS.md


def test_vista_report_of_the_benchmarks_folder_is_the_same_page(results, tables, tmp_path):
    from vista_dspy.experiments.report import write_results_page

    assert write_results_page(BENCHMARKS, tmp_path / "r.html").read_text(encoding="utf-8") == results.html_page(tables)


def test_links_to_results_headings_resolve():
    """README's and docs' links into RESULTS are checked with every other link (test_readme_links); RESULTS' own
    links (to its headings, to docs) the same way."""
    from test_readme_links import PAGES, broken_links

    assert REPO / "README.md" in PAGES and RESULTS not in PAGES
    assert broken_links(RESULTS.read_text(encoding="utf-8"), RESULTS, REPO) == []


def test_every_benchmark_script_is_named_in_results():
    text = RESULTS.read_text(encoding="utf-8")
    scripts = [p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh")]
    assert scripts and [name for name in scripts if name not in text] == []


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    return [REPO / p for p in out.split("\0") if p and (REPO / p).is_file()]


def test_no_tracked_file_over_1_mb():
    assert [str(p.relative_to(REPO)) for p in _tracked() if p.stat().st_size > 1_000_000] == []


MACHINE_PATH = re.compile(r'"(/(?:work|home|root|Users|tmp|mnt|var|opt)/[^"]*)"')


def test_no_committed_record_holds_an_absolute_machine_path():
    records = [p for p in _tracked() if p.parent.parent.name == "probes" or p.parent.name in ("fronts", "turn_cost")
               or p.name.endswith(".meta.json")]
    assert records
    found = {}
    for path in records:
        data = path.read_bytes()
        text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8", errors="ignore")
        if match := MACHINE_PATH.search(text):
            found[str(path.relative_to(REPO))] = match[1]
    assert found == {}


def test_probe_records_are_read_plain_or_gzipped(tmp_path):
    from vista_dspy.data.records import compress
    from vista_dspy.experiments.instrument import probe_turns

    row = {"dataset": "begin", "system": "x", "dialogue_id": "d1", "turn_index": 1, "part": "compile",
           "gold": "faithful", "label": "faithful", "score": 1.0, "claims": [],
           "usage": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "model_ms": 0}}
    (tmp_path / "turns.jsonl").write_text(json.dumps(row) + "\n")
    plain = probe_turns(tmp_path)
    packed = compress(tmp_path / "turns.jsonl")
    assert not (tmp_path / "turns.jsonl").exists() and packed.name == "turns.jsonl.gz"
    assert probe_turns(tmp_path).equals(plain)
    first = packed.read_bytes()
    (tmp_path / "turns.jsonl").write_text(json.dumps(row) + "\n")
    assert compress(tmp_path / "turns.jsonl").read_bytes() == first  # the same record commits the same bytes
