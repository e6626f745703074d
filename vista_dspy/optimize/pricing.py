"""What a judged turn costs, the second objective of a priced study and the unit of ``vista compile --budget``: the
model's own time for a local server (the milliseconds llama.cpp says it spent reading and writing, per call), or the
tokens priced by litellm's cost map for a hosted model. Both read ``Usage``: only calls that reached the model count
(a cached answer is free, which is why a study judges its trials with the LM cache off).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..schema import Usage

PriceName = Literal["time", "dollars"]
PRICES: tuple[str, ...] = ("time", "dollars")


class PriceError(ValueError):
    """A usage this price cannot read (no server timings, a model litellm has no price for)."""


@dataclass(frozen=True)
class Price:
    """How usage becomes cost. ``of`` gives a dialogue's raw cost (seconds, or dollars); the objective is the raw
    cost of all dialogues over their judged turns, times ``scale`` (dollars are quoted per 1,000 judged turns)."""

    name: PriceName
    unit: str
    scale: float = 1.0

    def of(self, usage: Usage) -> float:
        if self.name == "time":
            return _server_seconds(usage)
        return _dollars(usage)

    def per_turn(self, raw: float, turns: int) -> float:
        """The objective's value for ``raw`` cost over ``turns`` judged turns."""
        return self.scale * raw / turns if turns else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "unit": self.unit, "scale": self.scale}

    @classmethod
    def from_dict(cls, data: dict) -> Price:
        return cls(name=data["name"], unit=data["unit"], scale=float(data.get("scale", 1.0)))


SERVER_TIME = Price("time", "s per judged turn (the server's own time)")
DOLLARS = Price("dollars", "$ per 1,000 judged turns (litellm's cost map)", scale=1000.0)


def price_named(name: str) -> Price:
    if name not in PRICES:
        raise ValueError(f"unknown price {name!r}; choose one of {', '.join(PRICES)}")
    return SERVER_TIME if name == "time" else DOLLARS


def price_for(model: str | None, api_base: str | None) -> Price:
    """Time for the embedded model and for any self-hosted endpoint (an --api-base: llama.cpp, vLLM); dollars for a
    hosted provider's model."""
    from ..lm.weights import EMBEDDED

    return SERVER_TIME if model is None or model in EMBEDDED or api_base else DOLLARS


def _server_seconds(usage: Usage) -> float:
    total = usage.total
    if total.calls and not total.model_ms:
        raise PriceError(f"{total.calls} LM calls came back without the server's timings (llama.cpp's `timings`): "
                         "price this endpoint's tokens instead (--price dollars) or serve the model with llama.cpp")
    return total.model_ms / 1000.0


def _dollars(usage: Usage) -> float:
    from ..lm.offline import offline_litellm

    offline_litellm()  # litellm's own price table, never fetched
    import litellm

    cost = 0.0
    for model, counts in usage.by_model.items():
        if not counts.calls:
            continue
        try:
            prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=counts.prompt_tokens,
                                                        completion_tokens=counts.completion_tokens)
        except Exception as exc:  # litellm raises a bare Exception for a model its map lacks
            raise PriceError(f"litellm's cost map has no price for {model!r} ({' '.join(str(exc).split())[:200]}): "
                             "price its server time instead (--price time)") from None
        cost += prompt + completion
    return cost
