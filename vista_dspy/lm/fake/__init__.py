"""A fake LM for tests and benchmarks, offline and deterministic: ``rules`` (``RuleEngine``, answers from simple text
rules with failure markers; ``rule_lm``, a ``dspy.LM`` calling it in-process) and ``server`` (``FakeOpenAIServer``,
the same engine behind a real OpenAI-compatible HTTP endpoint with injected faults; ``python -m
vista_dspy.lm.fake.server`` runs one in its own process)."""

from ...lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "rules": ("AsyncRuleEngine", "RuleEngine", "rule_lm"),
    "server": ("FakeOpenAIServer",),
})
