"""VISTA as the factuality metric of other DSPy programs: one callable for ``dspy.Evaluate``, the optimizers and GEPA.

A grounded chatbot is built the DSPy way, as a program whose prediction is a response to a dialogue history and a
reference document; ``VistaMetric`` judges that response as VISTA judges an assistant turn: decomposed into claims,
each verified against the document and the claims of the earlier turns, each unverified one categorized. The
earlier turns are the knowledge store: their assistant turns are common ground (VISTA's "N/A" grounding: decomposed,
their claims stored unjudged), so a response may build on what was said before. The score is the share of the
response's claims that are safe, a claim the judge could not judge (ERROR) counting as not safe; a response that
makes no claim scores ``empty_score`` (default 0.0: saying nothing is not rewarded); one whose decomposition failed
or found no claim in its content has no score (``JudgeFailed``).

The judge runs under its own LM and adapter, whatever the program being optimized runs with, in any number of
threads; a turn judged before is not asked again, and ``usage`` counts every judge call per stage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy

from ..schema import Category, ClaimVerdict, Dialogue, DialogueVerdict, TurnVerdict, Usage, number_passages
from ..scoring import safe_and_judged
from ..spans import where
from ..stages import CallFailures, EndpointDown
from .dialogues import response_dialogue
from .judge_setup import JudgeSetup

logger = logging.getLogger(__name__)


class JudgeFailed(RuntimeError):
    """No claim of the response could be judged (its decomposition failed, or every claim is an ERROR after the
    parse retries): the response has no score, and ``dspy.Evaluate`` reports the example as an error."""


class JudgeEndpointDown(BaseException):
    """The judge's endpoint failed ``stop_after`` calls in a row. A ``BaseException``, so that ``dspy.Evaluate`` and
    the optimizers stop instead of counting every later example as an error."""


class VistaMetric:
    """VISTA as a DSPy metric.

    Args:
        judge: the judge's LM: "local" (the embedded model, started on the first call and stopped by ``close``),
            "local-0.5b", a model short name (``vista models``) or DSPy/litellm string, or a ``dspy.LM``.
        program: the VISTA program: a path or name (default: the compiled program for ``judge`` when one ships,
            else the seed).
        history_field, document_field, response_field: where the dialogue so far (a string of ``role: text``
            lines, a list of ``{"role", "content"}`` messages or of (role, text) pairs, or a ``dspy.History``), the
            reference (a text, or a list of retrieved passages) and the judged response are; each is looked up on
            the prediction, then on the example. Defaults fit a ``dspy.Signature("history, document -> response")``
            chatbot.
        threshold: a response passes (``trace`` given: bootstrapping) when its score reaches this and no part of it
            failed to be judged (an ERROR claim, a failed contradiction check: an ``unknown`` turn never passes).
            Default 1.0: every claim safe.
        empty_score: the score of a response that makes no claim at all (a greeting, a bare question, an empty
            answer). Default 0.0, so that an optimizer is not rewarded for saying nothing; 1.0 is the paper's
            reading (a turn with no claims is faithful).
        parse_retries, stop_after: as ``vista evaluate``'s (an unparseable answer is asked again; that many endpoint
            failures in a row stop the optimization with ``JudgeEndpointDown``).
        system: "vista" (the program's method) or "evidence" (the program's claims decided by its evidence model
            alone: Decompose is the only LM call, as ``vista evaluate --system evidence``; with ``units="sentences"``
            no LM call at all, and no model resolved or started: the no-LM tier, which needs no ``[local]`` extra).
        **options: judging options of the program (``JudgeOptions`` names), e.g. ``claim_calls="batched"``.

    How the judge and its LM are set up is ``judge_setup``'s (``setup``); how the history, the document and the
    response become a dialogue, ``dialogues``'.
    """

    def __init__(self, judge: str | dspy.BaseLM = "local", program: str | Path | None = None, *,
                 history_field: str = "history", document_field: str = "document",
                 response_field: str = "response", threshold: float = 1.0, empty_score: float = 0.0,
                 parse_retries: int = 2, stop_after: int = 3, port: int | None = None, system: str = "vista",
                 **options: Any) -> None:
        self.setup = JudgeSetup(judge, program, system=system, port=port, **options)
        self.judge = self.setup.program
        self.lm, self.adapter, self.model = self.setup.lm, self.setup.adapter, self.setup.model
        self.fields = {"history": history_field, "document": document_field, "response": response_field}
        self.threshold = threshold
        self.empty_score = empty_score
        self.calls = CallFailures(parse_retries, stop_after)
        self.usage = Usage()
        self.failures: list[str] = []
        self._turns: dict[str, TurnVerdict] = {}
        self._lock = threading.Lock()

    # ---- DSPy's metric ----------------------------------------------------------------------------------------
    def __call__(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> Judgement:
        """The response's VISTA score and feedback, in the one form ``dspy.Evaluate``, the bootstrapping optimizers
        and GEPA all take: a ``Judgement`` (a ``dspy.Prediction``) with ``score``, ``feedback`` (every unsafe claim
        with its category and reason, and what the reference says) and ``passed`` (the score reaches
        ``threshold``); it is truthy iff passed, which is what BootstrapFewShot asks of a traced metric. The
        feedback is the same for every predictor (``pred_name``, ``pred_trace``): VISTA judges the response."""
        turn = self.turn(gold, pred)
        score = self.score(turn)
        return Judgement(score=score, feedback=self.describe(turn, empty_score=self.empty_score),
                         passed=score >= self.threshold and turn.label != "unknown")

    def feedback(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> Judgement:
        """The metric itself, under its former name for GEPA (``GEPA(metric=metric)`` needs no ``.feedback``)."""
        return self(gold, pred, trace, pred_name, pred_trace)

    # ---- judging ---------------------------------------------------------------------------------------------
    def turn(self, example: Any, prediction: Any) -> TurnVerdict:
        """The verdict on the predicted response (cached: a turn judged before is not asked again)."""
        dialogue = self.dialogue(example, prediction)
        with self._lock:
            cached = self._turns.get(dialogue.id)
        if cached is not None:
            return cached
        turn = self.judge_dialogue(dialogue).turns[-1]
        with self._lock:
            self._turns[dialogue.id] = turn
        return turn

    def judge_dialogue(self, dialogue: Dialogue) -> DialogueVerdict:
        """VISTA's verdict on a whole dialogue under the judge's LM (its usage counted, its failures listed)."""
        self.start()
        try:
            # No trace: the judge's own calls are not the student's (an optimizer reads its trace for demos).
            with dspy.context(lm=self.lm, adapter=self.adapter, trace=None), self.calls.active():
                verdict = self.judge(dialogue)
        except EndpointDown as exc:
            raise JudgeEndpointDown(str(exc)) from None
        failed = unjudged_parts(verdict)
        with self._lock:
            self.usage.merge(verdict.usage)
            if failed:
                self.failures.append(f"{dialogue.id}: {failed[0]}")
        if failed:
            logger.warning("VISTA could not judge part of %s: %s", dialogue.id, failed[0])
        return verdict

    def score(self, turn: TurnVerdict) -> float:
        """Safe claims / all claims (an ERROR claim counts as not safe); ``empty_score`` for a response without
        claims; ``JudgeFailed`` when nothing of it could be judged."""
        errors = sum(c.category is Category.ERROR for c in turn.claims)
        if turn.error is not None or (turn.claims and errors == len(turn.claims)):
            raise JudgeFailed(f"no claim of the response could be judged: "
                              f"{turn.error or next(c.error for c in turn.claims if c.error)}")
        if not turn.claims:
            return self.empty_score
        safe, judged = safe_and_judged(c.category for c in turn.claims)
        return safe / (judged + errors)

    def dialogue(self, example: Any, prediction: Any, background: Sequence[str] = ()) -> Dialogue:
        """The history and the predicted response as a VISTA dialogue (``dialogues.response_dialogue``: earlier
        assistant turns as common ground, the response judged against the document, or the knowledge store alone
        without one). ``background``: facts that seed the knowledge store, before the history's system messages."""
        response = self._field(prediction, None, "response")
        if not isinstance(response, str):
            raise ValueError(f"the prediction has no text in its {self.fields['response']!r} field")
        return response_dialogue(self._field(example, prediction, "history"), response,
                                 self._field(example, prediction, "document"), background,
                                 response_field=self.fields["response"])

    def _field(self, first: Any, second: Any, role: str) -> Any:
        name = self.fields[role]
        for source in (first, second):
            if source is None:
                continue
            value = source.get(name) if hasattr(source, "get") else getattr(source, name, None)
            if value is not None:
                return value
        return None

    @staticmethod
    def describe(turn: TurnVerdict, document: Any = None, *, empty_score: float = 0.0) -> str:
        """Feedback for an optimizer: every unsafe claim with its category and the judge's reason, and what the
        reference says (``document``, else the turn's passages)."""
        if document is None and turn.passages:
            document = number_passages(turn.passages)
        unsafe = [c for c in turn.claims if c.category in (Category.CONTRADICTED, Category.LACKING_EVIDENCE)]
        if not turn.claims:
            return (f"The response makes no claim: it says nothing the reference could support (scored "
                    f"{empty_score:g}).")
        lines = [f"{len(unsafe)} of {len(turn.claims)} claims of the response are not supported by the reference "
                 "or the dialogue so far." if unsafe else
                 f"All {len(turn.claims)} claims of the response are supported, or are opinions, remarks or "
                 "refusals."]
        lines += [f"- {claim_line(claim, turn.text)}" for claim in unsafe]
        errors = [c for c in turn.claims if c.category is Category.ERROR]
        if errors:
            lines.append(f"({len(errors)} claims could not be judged: they count as not supported.)")
        if unsafe and document:
            text = " ".join(str(document).split())
            lines.append(f"The reference says: {text[:600]}{' ...' if len(text) > 600 else ''}")
        if unsafe:
            lines.append("Say only what the reference or the earlier turns support, or say that you do not know.")
        return "\n".join(lines)

    # ---- the embedded server ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the embedded server (done by the first judged turn; call it first when the program being
        optimized runs on the same embedded model)."""
        self.setup.start()

    def close(self) -> None:
        """Stop the embedded server this metric started (if any)."""
        self.setup.close()

    def __enter__(self) -> VistaMetric:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Judgement(dspy.Prediction):
    """What ``VistaMetric`` returns: ``score``, ``feedback`` and ``passed``; truthy iff ``passed``."""

    def __bool__(self) -> bool:
        return bool(self.get("passed"))


def unjudged_parts(verdict: DialogueVerdict) -> list[str]:
    """Why parts of a verdict were not judged: its claims that are ERRORs, its turns that failed (the decomposition,
    the contradiction check), its background turns that could not be decomposed."""
    failed = [f"claim {c.claim!r} could not be judged: {c.error}" for t in verdict.turns for c in t.claims if c.error]
    failed += [t.error for t in verdict.turns if t.error] + verdict.errors
    return failed + [f"the contradiction check failed: {t.contradiction.error}" for t in verdict.turns
                     if t.contradiction is not None and t.contradiction.error]


def claim_line(claim: ClaimVerdict, turn: str | None = None) -> str:
    """One judged claim in a line: its category, its text, (given the ``turn``'s text) where the turn said it, and
    the judge's reason."""
    why = claim.error if claim.category is Category.ERROR else claim.explanation
    said = ""
    if turn is not None and claim.spans:
        said = " (said as \"" + " ... ".join(turn[start:end] for start, end in claim.spans) + \
            f"\" at {where(claim)} of the response)"
    return f"{claim.category.value}: \"{claim.claim}\"{said} -- {why or 'no reason given'}"
