"""The HTML report highlights where each turn said its unsafe claims (``ClaimVerdict.spans``): the markup, and the
page rendered in headless Chromium with the highlight on screen."""

import shutil
import subprocess

import dspy
import pytest

from vista_dspy.experiments.report import build_report, screenshot
from vista_dspy.lm.fake import RuleEngine, rule_lm
from vista_dspy.program import Vista
from vista_dspy.run.runner import Threads, evaluate
from vista_dspy.schema import Dialogue, Grounding, Turn

TURN = "Tromsø is milder than you might expect. It has 200 days of snow a year."
DOC = "Tromsø is milder than you might expect. The average January temperature is minus 4 degrees."
# The fake judge finds the first sentence in the reference (VERIFIED) and not the second (LACKING EVIDENCE).
MARK = ('<mark class="span-lacking-evidence" title="LACKING EVIDENCE: \u201cIt has 200 days of snow a year.\u201d '
        '\u2014 rule for LACKING EVIDENCE">It has 200 days of snow a year</mark>')


@pytest.fixture
def report(tmp_path):
    dialogue = Dialogue(id="tromso", turns=[Turn(role="user", text="How cold is Tromsø?"),
                                             Turn(role="assistant", text=TURN, grounding=Grounding.from_document(DOC))])
    out = tmp_path / "run"
    evaluate([dialogue], Vista.from_program(None), Threads(rule_lm(RuleEngine()), dspy.JSONAdapter()), out_dir=out)
    return build_report(out)


def test_the_report_marks_the_unsafe_span_of_the_turn_with_its_category_and_reason(report):
    assert ('<span class="role">judged turn:</span> <span class="turn-text">Tromsø is milder than you might expect. '
            + MARK + '.</span>') in report
    assert report.count("<mark ") == 1  # the verified sentence is not marked


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine (.ci/run installs Debian's chromium)")
def test_the_highlighted_span_renders_in_headless_chromium(report, tmp_path):
    import matplotlib.image
    import numpy as np

    page = tmp_path / "report.html"
    page.write_text(report.replace('<details class="turn"', '<details open class="turn"'))  # as a click opens it
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert MARK in dom  # parsed as one element, its title intact
    png = screenshot(page, tmp_path / "shot.png", width=1000, height=4000)
    pixels = (matplotlib.image.imread(png)[..., :3] * 255).round()
    highlight = np.all(np.abs(pixels - (0xfd, 0xe8, 0xa8)) <= 2, axis=-1)  # the mark's background colour
    assert highlight.sum() > 200  # a span of text is painted in it
