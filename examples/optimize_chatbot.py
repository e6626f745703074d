"""A grounded chatbot evaluated and improved with VISTA as its metric (``vista_dspy.VistaMetric``).

The chatbot is a plain DSPy program, ``history, document -> response``; its examples are the assistant turns of the
annotated dev file that come with a reference document (the history is the dialogue before the turn). It is scored
with ``dspy.Evaluate`` on the turns of some dialogues, improved on the turns of others, and scored again on the
first dialogues, which it did not train on. The same metric object serves all three. Two optimizers:
``--optimizer bootstrap`` (``dspy.BootstrapFewShot``: a demo is kept only when VISTA finds every claim of its
response safe) and ``--optimizer gepa`` (``dspy.GEPA``: the chatbot's instruction is rewritten by a reflection LM that
reads VISTA's feedback, the unsupported claims with their category and reason).

    python examples/optimize_chatbot.py                          # the embedded model writes and judges
    python examples/optimize_chatbot.py --model gpt-4o-mini --judge gpt-4o --dialogues 20 --optimizer gepa
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import dspy

from vista_dspy import VistaMetric
from vista_dspy.data import InputError, load_dialogues
from vista_dspy.prompts import render_history
from vista_dspy.run.judge_metric import JudgeEndpointDown


def annotated_file(given: Path | None) -> Path:
    """``--data``, else the annotated development half through the project's one lookup: the cache after
    `vista data get vista-human`, else the data directory (``$VISTA_DATA_DIR``); neither: ``InputError`` saying to
    run `vista data get vista-human`."""
    from vista_dspy.data.location import data_dir
    from vista_dspy.experiments.bench import dataset_path

    return given or dataset_path("vista-human", data_dir())


class Respond(dspy.Signature):
    """You are a helpful assistant in a conversation about a topic. Answer the user's last message in one to three
    sentences, using only what the reference document and the conversation say; if they do not say it, say so."""

    history: str = dspy.InputField(desc="the conversation so far, one 'role: text' line each")
    document: str = dspy.InputField(desc="the reference document for this answer")
    response: str = dspy.OutputField(desc="your answer")


class Chatbot(dspy.Module):
    def __init__(self) -> None:
        super().__init__()
        self.respond = dspy.Predict(Respond)

    def forward(self, history: str, document: str) -> dspy.Prediction:
        return self.respond(history=history, document=document)


def examples(dialogues) -> list[dspy.Example]:
    """One example per assistant turn that has a reference document: the history before it and the document."""
    found = []
    for dialogue in dialogues:
        for index in dialogue.judged_turns:
            turn = dialogue.turns[index]
            if turn.grounding.document:
                found.append(dspy.Example(history=render_history(dialogue.turns[:index]),
                                          document=turn.grounding.document).with_inputs("history", "document"))
    return found


def build_lm(model: str, api_base: str | None) -> dspy.BaseLM:
    from vista_dspy.lm.models import MODELS, ModelConfig

    config = MODELS[model].config(api_base=api_base) if model in MODELS else ModelConfig(model=model, api_base=api_base)
    return config.build()


def student_lm(model: str, metric: VistaMetric) -> dspy.BaseLM:
    """The chatbot's LM: a copy of the judge's when both are the same embedded model (one server), else its own."""
    if model == metric.model:
        return metric.lm.copy()
    return build_lm(model, None)


def changed(chatbot: Chatbot, improved: Chatbot) -> bool:
    return improved.respond.signature.instructions != chatbot.respond.signature.instructions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="local", help="the chatbot's model (default: the embedded one)")
    parser.add_argument("--judge", default="local", help="the judge's model (default: the embedded one)")
    parser.add_argument("--dialogues", type=int, default=4, help="dialogues to evaluate on, and as many to train on")
    parser.add_argument("--demos", type=int, default=2, help="bootstrapped demos at most")
    parser.add_argument("--data", type=Path, default=None,
                        help="VISTA's annotated file (default: vista-human, as `vista data get` keeps it)")
    parser.add_argument("--api-base", default=None, help="an OpenAI-compatible endpoint serving --model and --judge")
    parser.add_argument("--optimizer", choices=("bootstrap", "gepa"), default="bootstrap")
    parser.add_argument("--budget", type=int, default=None,
                        help="GEPA: metric calls at most (default: four passes over the training turns)")
    parser.add_argument("--reflection-model", default=None,
                        help="GEPA: the LM that rewrites the instruction (default: the chatbot's)")
    args = parser.parse_args(argv)

    try:
        dialogues = [d for d in load_dialogues(annotated_file(args.data)) if examples([d])]
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    held_out, train = examples(dialogues[: args.dialogues]), examples(dialogues[args.dialogues: 2 * args.dialogues])
    print(f"{len(held_out)} turns to evaluate on ({args.dialogues} dialogues), {len(train)} to train on", flush=True)
    started = time.perf_counter()
    try:
        judge, lm = ((build_lm(args.judge, args.api_base), build_lm(args.model, args.api_base)) if args.api_base
                     else (args.judge, None))
        with VistaMetric(judge) as metric:
            metric.start()
            chatbot, lm = Chatbot(), lm or student_lm(args.model, metric)
            chatbot.set_lm(lm)
            # max_errors=1: a response that cannot be produced or judged stops the example (DSPy would score it 0,
            # and a before/after comparison needs every turn judged both times).
            evaluate = dspy.Evaluate(devset=held_out, metric=metric, num_threads=1, display_progress=True,
                                     max_errors=1)
            before = evaluate(chatbot)
            if args.optimizer == "gepa":
                reflection = build_lm(args.reflection_model, args.api_base) if args.reflection_model else lm
                optimizer = dspy.GEPA(metric=metric, reflection_lm=reflection, num_threads=1,
                                      max_metric_calls=args.budget or 4 * len(train), reflection_minibatch_size=2)
            else:
                optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=args.demos,
                                                  max_labeled_demos=0)
            improved = optimizer.compile(chatbot, trainset=train)
            improved.set_lm(lm)  # the compiled copy starts without an LM (DSPy resets its predictors)
            after = evaluate(improved)
    except JudgeEndpointDown as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # DSPy's "Execution cancelled due to errors": the logged error above says which
        print(f"error: {exc}", file=sys.stderr)
        return 1
    minutes = (time.perf_counter() - started) / 60
    how = (f"instruction {'rewritten' if changed(chatbot, improved) else 'kept'} by GEPA on {len(train)} turns"
           if args.optimizer == "gepa" else f"{len(improved.respond.demos)} demos bootstrapped on {len(train)} turns")
    print(f"\nVISTA score of the chatbot on {len(held_out)} held-out turns: {before.score / 100:.3f} before, "
          f"{after.score / 100:.3f} after ({how})")
    if args.optimizer == "gepa":
        print(f"instruction: {improved.respond.signature.instructions}")
    stages = ", ".join(f"{stage} {counts.calls}" for stage, counts in metric.usage.by_stage.items())
    print(f"judge: {metric.usage.total.calls} LM calls ({stages}); {len(metric.failures)} judging failures; "
          f"{minutes:.1f} min in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
