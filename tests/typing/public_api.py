"""How a user's code reads the public faces, checked by mypy in .ci/run (never run: a type check's input). Each
line is a use an editor should type: the names from the package face, their constructors and verbs, and the
integrations' metric classes."""

from __future__ import annotations

from vista_dspy import Category, Dialogue, DialogueVerdict, Grounding, Turn, Vista, VistaMetric, VistaReward
from vista_dspy.integrations.deepeval import VistaConversationalMetric
from vista_dspy.integrations.ragas import VistaMultiTurn


def judge_one(dialogue: Dialogue) -> float | None:
    vista: Vista = Vista.for_model("seed")
    verdict: DialogueVerdict = vista(dialogue)
    return verdict.score


def metric_score(metric: VistaMetric, example: dict[str, str], prediction: dict[str, str]) -> float:
    judgement = metric(example, prediction)
    turn = metric.turn(example, prediction)
    return metric.score(turn) if judgement else 0.0


def rewards(reward: VistaReward, prompts: list[str], completions: list[str]) -> list[float | None]:
    return reward(prompts, completions, document=["Lisbon has seven hills."] * len(prompts))


def a_dialogue() -> Dialogue:
    return Dialogue(id="d", turns=[Turn(role="user", text="Hills?"),
                                   Turn(role="assistant", text="Seven.",
                                        grounding=Grounding.from_document("Lisbon has seven hills."))])


def unsafe(category: Category) -> bool:
    return category in (Category.CONTRADICTED, Category.LACKING_EVIDENCE)


def peers(metric: VistaMetric) -> tuple[VistaConversationalMetric, VistaMultiTurn]:
    return VistaConversationalMetric(metric, threshold=0.5), VistaMultiTurn(metric, name="vista")
