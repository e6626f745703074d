"""How a judging method's LM calls run: a method is a generator that yields batches of stage calls, and one driver
runs them blocking (``forward``), another concurrently (``aforward``). Each call's usage is measured; an answer that
does not parse is asked again past the cache; any other failure becomes an explicit error result, except a fatal
configuration error and an endpoint that keeps failing (``EndpointDown``, when the caller's ``CallFailures`` says
so): those stop the judging, so that a dialogue is never finished on an outage's errors. Shared by VISTA and the
baselines.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.utils.exceptions import (
    AdapterParseError,
    ContextWindowExceededError,
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMRateLimitError,
    LMServerError,
    LMTimeoutError,
    LMTransportError,
    LMUnsupportedFeatureError,
    LMUnsupportedModelError,
)

from . import scoring
from .label_probabilities import REQUEST as LABEL_PROBABILITIES_REQUEST
from .label_probabilities import Distribution, label_distributions
from .schema import Dialogue, DialogueVerdict, Stage, TurnVerdict, Usage, UsageCounts

# An answer that does not parse is asked again up to this many times, past the cache (HTTP errors and timeouts are
# retried by the LM client).
PARSE_RETRIES = 2
# Endpoint failures in a row (each after the client's own retries) that stop a run: the endpoint is down.
STOP_AFTER = 3
# Errors that no retry or per-claim fallback can fix: stop the run instead of filling it with ERROR verdicts.
FATAL_LM_ERRORS = (
    LMConfigurationError, LMAuthError, LMBillingError, LMUnsupportedModelError, LMUnsupportedFeatureError
)
# Errors that say the endpoint did not answer (refused or dropped connection, DNS, timeout, 5xx, rate limit), as
# opposed to an answer that could not be used.
ENDPOINT_ERRORS = (LMTransportError, LMTimeoutError, LMServerError, LMRateLimitError, ConnectionError, TimeoutError)


class EndpointDown(RuntimeError):
    """The LM endpoint failed ``stop_after`` calls in a row: judging stops (the dialogue in progress is not
    finished)."""


class JudgingStopped(BaseException):
    """The run was interrupted (Ctrl-C, SIGTERM): a dialogue still in progress on a thread of its own stops at its
    next LM call instead of running to its end unrecorded. Not an ``Exception``: no per-claim fallback takes it for a
    failed call."""


class CallFailures:
    """How one run treats failed LM calls (thread-safe, shared by all its dialogues): an unparseable answer is asked
    again up to ``parse_retries`` times past the cache, and ``stop_after`` endpoint failures in a row -- with no
    answer in between -- raise ``EndpointDown`` in every call from then on (``None``: never; the failures stay
    ERROR verdicts). Whoever runs the judge activates one (``active``); the default never stops."""

    def __init__(self, parse_retries: int = PARSE_RETRIES, stop_after: int | None = STOP_AFTER) -> None:
        self.parse_retries, self.stop_after = max(0, parse_retries), stop_after or None
        self.in_a_row = 0
        self.down: str | None = None
        self.stopped = False
        self._lock = threading.Lock()

    def before_call(self) -> None:
        if self.stopped:
            raise JudgingStopped
        if self.down is not None:
            raise EndpointDown(self.down)

    def stop(self) -> None:
        """Every later call of the run raises ``JudgingStopped`` (the run was interrupted)."""
        self.stopped = True

    def answered(self) -> None:
        with self._lock:
            self.in_a_row = 0

    def endpoint_failed(self, error: Exception) -> None:
        with self._lock:
            self.in_a_row += 1
            if self.stop_after is not None and self.in_a_row >= self.stop_after and self.down is None:
                self.down = f"the model endpoint failed {self.in_a_row} calls in a row; the last: {_describe(error)}"
        self.before_call()

    @contextlib.contextmanager
    def active(self):
        token = FAILURES.set(self)
        try:
            yield self
        finally:
            FAILURES.reset(token)


FAILURES: contextvars.ContextVar[CallFailures] = contextvars.ContextVar(
    "vista_call_failures", default=CallFailures(stop_after=None))  # noqa: B039 (outside a run: nothing counts)


@dataclass
class StageCall:
    stage: Stage
    predictor: dspy.Predict
    inputs: dict[str, Any]
    signature: type[dspy.Signature] | None = None
    demos: list[dspy.Example] | None = None  # instead of the predictor's own (batched prompts)
    answers: int = 1  # claims answered in one call (scales the short-answer token cap)
    # (field, labels): read the probability of each label of this field from the answer's token log-probabilities
    # (one distribution per value of the field, ``label_probabilities``), when the judge asks for them.
    label: tuple[str, tuple[str, ...]] | None = None
    # The signature of retry n (1, 2, ...) after an answer that did not parse: a repeat must change something, or a
    # deterministic server gives the identical answer again (Decompose: a tighter answer bound).
    retry_signature: Callable[[int], type[dspy.Signature]] | None = None


@dataclass
class StageResult:
    prediction: dspy.Prediction | None
    error: str | None
    usage: dict[str, UsageCounts] = field(default_factory=dict)
    # One distribution per value of the call's label field, in answer order (empty: none were given).
    distributions: list[Distribution | None] = field(default_factory=list)
    # Label values whose probabilities the answer carried but that could not be read (None in ``distributions``;
    # every value when none was found): booked in ``Usage.unread_probabilities`` by ``add_usage``.
    unread: int = 0


def _usage_of(tracker: Any) -> dict[str, UsageCounts]:
    """The calls each model answered, from DSPy's usage entries (``lm.clients.timings`` books a cache hit as an
    entry of its own, ``{"cache_hit": 1}``)."""
    return {
        model: UsageCounts(
            calls=sum(not e.get("cache_hit") for e in entries),
            cache_hits=sum(bool(e.get("cache_hit")) for e in entries),
            prompt_tokens=sum(int(e.get("prompt_tokens") or 0) for e in entries),
            completion_tokens=sum(int(e.get("completion_tokens") or 0) for e in entries),
            cached_prompt_tokens=sum(int(e.get("server_cached_tokens") or 0) for e in entries),
            prompt_ms=round(sum(float(e.get("server_prompt_ms") or 0) for e in entries), 3),
            generation_ms=round(sum(float(e.get("server_generation_ms") or 0) for e in entries), 3),
        )
        for model, entries in tracker.usage_data.items()
    }


def add_usage(usage: Usage, stage: str, result: StageResult) -> StageResult:
    """Book one stage call's usage; returns the result so calls can be accounted inline."""
    for model, counts in result.usage.items():
        usage.add(stage, model, counts)
    usage.unread(stage, result.unread)
    return result


# How servers say a prompt is longer than the model's context (llama.cpp, vLLM, OpenAI; litellm's own class).
CONTEXT_EXCEEDED = ("exceeds the available context", "maximum context length", "context length", "context window")


def _describe(error: Exception) -> str:
    text = " ".join(str(error).split())
    if isinstance(error, ContextWindowExceededError) or any(words in text.lower() for words in CONTEXT_EXCEEDED):
        # Nothing is cut to fit: the call fails, its claim or turn says why, and the run goes on.
        return f"the prompt does not fit the model's context (nothing was cut): {type(error).__name__}: {text[:300]}"
    return f"{type(error).__name__}: {text[:500]}"


# What the async driver holds around each predictor call, given the LM about to be called: whoever runs the judge
# sets it (the runner: a slot of its bound on requests in flight). The method itself knows nothing of throttling.
CallGuard = Callable[[Any], contextlib.AbstractAsyncContextManager]
CALL_GUARD: contextvars.ContextVar[CallGuard] = contextvars.ContextVar(
    "vista_call_guard", default=lambda lm: contextlib.nullcontext())


class _Attempts:
    """The retry policy of one stage call, shared by both drivers: iterating gives each attempt's predictor
    arguments; an unparseable answer is asked again (past the cache) as the run's ``CallFailures`` allows, any
    other failure ends the attempts, and a fatal configuration error or a down endpoint propagates."""

    def __init__(self, module: StagedModule, call: StageCall) -> None:
        self.module, self.call = module, call
        self.failures = FAILURES.get()
        self.prediction: dspy.Prediction | None = None
        self.error: str | None = None
        self.distributions: list[Distribution | None] = []
        self.unread = 0
        self._again = True

    def __iter__(self):
        for attempt in range(1 + self.failures.parse_retries):
            self.failures.before_call()
            yield self.module._kwargs(self.call, attempt)
            if not self._again:
                return

    def succeeded(self, prediction: dspy.Prediction) -> None:
        self.prediction, self.error, self._again = prediction, None, False
        self.failures.answered()
        # The token log-probabilities are read once, here, and not kept: a trace or a demo never carries them.
        logprobs = prediction._store.pop("logprobs", None) if isinstance(prediction, dspy.Prediction) else None
        if self.call.label is not None and logprobs is not None:
            self.distributions = label_distributions(logprobs, *self.call.label)
            self.unread = (sum(d is None for d in self.distributions) if self.distributions
                           else self.call.answers)

    def failed(self, error: Exception) -> None:
        if isinstance(error, (*FATAL_LM_ERRORS, EndpointDown)):
            raise error
        self.error, self._again = _describe(error), isinstance(error, AdapterParseError)
        if isinstance(error, ENDPOINT_ERRORS):
            self.failures.endpoint_failed(error)
        else:
            self.failures.answered()  # an answer that could not be used: the endpoint is up

    def result(self, tracker: Any) -> StageResult:
        return StageResult(self.prediction, self.error, _usage_of(tracker), self.distributions,
                           self.unread if self.error is None else 0)


class StagedModule(dspy.Module):
    """A judging method whose ``_judge`` generator yields batches of stage calls and returns the verdict;
    ``forward`` runs the batches blocking, ``aforward`` awaits each batch's calls concurrently.

    The two drivers and the two call runners are twins on purpose: the blocking path must stay free of an event
    loop (DSPy's sync and async calls use different clients and cache entries, and threads call ``forward``), and
    Python cannot share a loop body between ``await`` and a plain call. Everything else -- the retry policy
    (``_Attempts``), the call arguments (``_kwargs``), usage accounting -- is written once.
    """

    zero_shot: bool = False
    short_answer_tokens: int | None = None
    label_probabilities: bool = False  # ask label stages for token log-probabilities (StageCall.label)
    program_name: str = "unsaved"

    def option_values(self) -> dict[str, Any]:
        """The judge's switches, as verdicts and run.json record them."""
        return {}

    def forward(self, dialogue: Dialogue) -> DialogueVerdict:
        return self._drive(self._judge(dialogue))

    async def aforward(self, dialogue: Dialogue) -> DialogueVerdict:
        return await self._adrive(self._judge(dialogue))

    def _judge(self, dialogue: Dialogue) -> Generator[list[StageCall], list[StageResult], DialogueVerdict]:
        raise NotImplementedError

    def _verdict(
        self, dialogue: Dialogue, turns: list[TurnVerdict], usage: Usage, errors: list[str],
        ungrounded_background: list[str] | None = None,
    ) -> DialogueVerdict:
        options = self.option_values()
        turns = scoring.settle_turns(turns, errors, empty_turns=options.get("empty_turns", "unknown"),
                                     accumulate=options.get("accumulate", True))
        return DialogueVerdict(
            dialogue_id=dialogue.id,
            turns=turns,
            score=scoring.micro_score(turns),
            usage=usage,
            errors=errors,
            ungrounded_background=ungrounded_background or [],
            program=self.program_name,
            model=_current_model(),
            options=options,
            source=dialogue.source,
        )

    # ---- drivers -------------------------------------------------------------------------------------------
    def _drive(self, steps: Generator[list[StageCall], list[StageResult], DialogueVerdict]) -> DialogueVerdict:
        results: list[StageResult] | None = None
        while True:
            try:
                batch = steps.send(results)  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value
            # Claims of one turn back to back: a local server reuses the cached prompt prefix.
            results = [self._call(call) for call in batch]

    async def _adrive(
        self, steps: Generator[list[StageCall], list[StageResult], DialogueVerdict]
    ) -> DialogueVerdict:
        results: list[StageResult] | None = None
        while True:
            try:
                batch = steps.send(results)  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value
            results = list(await asyncio.gather(*(self._acall(call) for call in batch)))

    def _kwargs(self, call: StageCall, attempt: int = 0) -> dict[str, Any]:
        kwargs = dict(call.inputs)
        if call.signature is not None:
            kwargs["signature"] = call.signature
        if self.zero_shot:
            kwargs["demos"] = []
        elif call.demos is not None:
            kwargs["demos"] = call.demos
        config: dict[str, Any] = {}
        if attempt and call.retry_signature is not None:
            kwargs["signature"] = call.retry_signature(attempt)
        if self.short_answer_tokens and call.stage != "decompose":
            thinking = 3 if call.signature is not None and "reasoning" in call.signature.output_fields else 1
            # A retry gets twice the room per attempt: an answer cut at the cap is not asked identically again.
            config["max_tokens"] = self.short_answer_tokens * call.answers * thinking << attempt
        if call.label is not None and self.label_probabilities:
            config.update(LABEL_PROBABILITIES_REQUEST)
        if attempt:
            # The unparseable answer sits in the cache: ask the model again past it.
            config["cache"] = False
        if config:
            kwargs["config"] = config
        return kwargs

    def _call(self, call: StageCall) -> StageResult:
        attempts = _Attempts(self, call)
        with dspy.track_usage() as tracker:
            for kwargs in attempts:
                try:
                    attempts.succeeded(call.predictor(**kwargs))
                except Exception as exc:
                    attempts.failed(exc)
        return attempts.result(tracker)

    async def _acall(self, call: StageCall) -> StageResult:
        attempts = _Attempts(self, call)
        guard = CALL_GUARD.get()
        with dspy.track_usage() as tracker:
            for kwargs in attempts:
                try:
                    async with guard(call.predictor.lm or dspy.settings.lm):
                        attempts.succeeded(await call.predictor.acall(**kwargs))
                except Exception as exc:
                    attempts.failed(exc)
        return attempts.result(tracker)


def _current_model() -> str | None:
    lm = dspy.settings.lm
    return getattr(lm, "model", None) if lm is not None else None
