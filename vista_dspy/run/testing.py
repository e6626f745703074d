"""VISTA as a test: the thresholds of a CI gate (``vista evaluate --fail-under``) and a pytest assertion.

    from vista_dspy.run.testing import assert_faithful

    def test_the_bot_answers_from_its_sources(judge):          # judge: a session-wide VistaMetric fixture
        assert_faithful(chat_log, judge=judge, min_score=1.0)   # a Dialogue or a conversation of chat messages
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy

from ..schema import UNSAFE_CATEGORIES, Category, Dialogue, DialogueVerdict
from ..scoring import summarize
from .judge_metric import VistaMetric, claim_line

# What a run could not judge, by kind: each is a failure of its own (a turn's ERROR claims and the turn are not both
# counted: a turn counts only when it has no claim to fail).
NOT_JUDGED = {"claims": "ERROR claims", "turns_failed": "turns without claims (failed or empty decomposition)",
              "contradiction_checks": "failed contradiction checks", "dialogue_errors": "failed background turns"}


def not_judged(summary: dict[str, Any]) -> dict[str, int]:
    """The failures in a run's summary (``scoring.summarize``), by kind (``NOT_JUDGED``), leaving out kinds with none."""
    errors = summary.get("errors", {})
    return {kind: errors[kind] for kind in NOT_JUDGED if errors.get(kind)}


def shortfalls(summary: dict[str, Any], *, min_score: float | None = None, min_faithful: float | None = None,
               max_unjudged: int | None = None) -> dict[str, str]:
    """The thresholds a run's summary (``scoring.summarize``) misses, by name, each said in a few words; empty when
    it passes. ``min_score``: the micro VISTA score (no judged claim at all misses it; the score leaves ERROR claims
    out, so pair it with ``max_unjudged``); ``min_faithful``: the share of judged turns labelled faithful (an
    ``unknown`` turn is not faithful); ``max_unjudged``: the most failures (``not_judged``) allowed."""
    missed = {}
    if min_score is not None:
        score = summary["vista_score"]
        if score is None or score < min_score:
            missed["min_score"] = f"VISTA score {'n/a' if score is None else f'{score:.3f}'} is below {min_score:g}"
    if min_faithful is not None:
        judged, faithful = summary["judged_turns"], summary["turn_labels"]["faithful"]
        share = faithful / judged if judged else None
        if share is None or share < min_faithful:
            missed["min_faithful"] = (f"faithful turns {faithful}/{judged}"
                                      f"{'' if share is None else f' ({share:.3f})'} are below {min_faithful:g}")
    if max_unjudged is not None:
        failures = not_judged(summary)
        if sum(failures.values()) > max_unjudged:
            missed["max_unjudged"] = (f"{sum(failures.values())} not judged ("
                                      + ", ".join(f"{n} {NOT_JUDGED[kind]}" for kind, n in failures.items())
                                      + f") is more than {max_unjudged} allowed")
    return missed


def assert_faithful(dialogue: Dialogue | list[dict[str, Any]] | dict[str, Any],
                    judge: VistaMetric | str | dspy.BaseLM = "local", *, min_score: float = 1.0,
                    min_faithful: float | None = None, max_unjudged: int = 0) -> DialogueVerdict:
    """Judge ``dialogue`` with VISTA and fail (``AssertionError``) when its VISTA score is below ``min_score``
    (default 1.0: every judged claim safe), its share of faithful turns below ``min_faithful`` (default: not
    checked), or more than ``max_unjudged`` things could not be judged (default 0: an ERROR claim, a turn without
    claims, a failed contradiction check or background turn fails the test). The message names every unsafe claim
    with its turn, its category and the judge's explanation, and every failure. Returns the verdict.

    ``dialogue``: a ``Dialogue``, or one conversation in the chat shape (a list of ``{role, content}`` messages, or
    ``{"messages": [...]}``; see ``vista_dspy.data.chat``). ``judge``: a ``VistaMetric`` (share one across tests:
    with the embedded model it starts one server, and its ``usage`` counts every test's calls), or what
    ``VistaMetric`` takes as its judge (a model name or a ``dspy.LM``: a metric is made, and closed, for this
    call).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    if not isinstance(dialogue, Dialogue):
        from ..data.chat import dialogue_from_chat

        dialogue = dialogue_from_chat(Path("<dialogue>"), "conversation", dialogue, 0)
    if isinstance(judge, VistaMetric):
        verdict = judge.judge_dialogue(dialogue)
    else:
        with VistaMetric(judge) as metric:
            verdict = metric.judge_dialogue(dialogue)
    missed = list(shortfalls(summarize([verdict]), min_score=min_score, min_faithful=min_faithful,
                             max_unjudged=max_unjudged).values())
    unjudged = [claim_line(c) for t in verdict.turns for c in t.claims if c.category is Category.ERROR]
    unjudged += [f"turn {t.turn_index}: {t.error}" for t in verdict.turns if t.error]
    unjudged += [f"turn {t.turn_index}: contradiction check failed: {t.contradiction.error}" for t in verdict.turns
                 if t.contradiction and t.contradiction.error] + verdict.errors
    if missed:
        lines = [f"VISTA: dialogue {dialogue.id}: {'; '.join(missed)}"]
        lines += [f"  turn {t.turn_index}: {claim_line(c)}" for t in verdict.turns for c in t.claims
                  if c.category in UNSAFE_CATEGORIES]
        lines += [f"  not judged: {line}" for line in unjudged]
        raise AssertionError("\n".join(lines))
    return verdict
