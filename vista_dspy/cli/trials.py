"""A study's trial as a program: built from the programs the study kept and its demo pool, its meta (the study,
the gate, the test part, what it was fitted on), saved with its card. Shared by `vista compile` (a new study, or
--study RESULT) and `vista study` (the demo pool)."""

from __future__ import annotations

import json
from pathlib import Path

from .common import dspy_context, err, fail, model_setup, run_errors


def program_of_trial(result, trial, *, model: str | None, api_base: str | None, gguf: Path | None, port: int,
                      data_dir: Path | None, cache: bool, threads: int | None):
    """The program a study trial describes, from the starting programs the study kept (checked by content hash)
    and, for a trial reading pool demos, the pool rebuilt with the LM (checked likewise)."""
    from ..optimize.study import candidate, reads_pool
    from ..program import Vista

    try:
        bases = result.starting_programs()
    except ValueError as exc:
        raise fail(str(exc)) from None
    pool = None
    if reads_pool(trial.params):  # drawn from the pool, or bootstrapped from its labelled claims
        from ..lm.clients.cache import use_cache_for
        from .train_dev import pool_dialogues, pool_spec

        train = (result.pool or {}).get("train") or {}
        spec = pool_spec(train)
        pooled = pool_dialogues(spec, data_dir, int(train.get("seed", 0)), None,
                                frozenset(result.data.get("dialogues", [])))
        lm_setup = model_setup(err, model or result.model_name, api_base=api_base, gguf=gguf, port=port, cache=cache)
        use_cache_for(lm_setup.config)
        seed = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens,
                                  label_probabilities=lm_setup.label_probabilities)
        with run_errors(ValueError), lm_setup.server, dspy_context(lm_setup.config):
            pool, record = study_pool(seed, pooled, threads or lm_setup.threads,
                                       lambda message: err.print(message, highlight=False))
        if record["sha256"] != result.pool.get("sha256"):
            raise fail(f"the demo pool rebuilt from {spec} is not the one study {result.study} used: run the study "
                       "again")
    return candidate(bases, pool, trial.params, result.instructions or None)


def _rule_provenance(base: str, out_dir: Path | None) -> dict | None:
    """How the decision rule a trial keeps from its starting program was compiled: that program's meta settings
    (its probe, recipe and split), read before a trial saved under the same name replaces them."""
    from ..compiled.files import program_folders

    for folder in dict.fromkeys((*([out_dir] if out_dir else []), *program_folders())):
        path = folder / f"{base}.meta.json"
        if path.is_file():
            settings = json.loads(path.read_text()).get("settings") or {}
            return {"program": base, **settings.get("rule_compiled", settings)}
    return None


def save_trial(result, trial, program, verdict, name: str, budget: float | None, out_dir: Path | None, *,
                extra: dict | None = None) -> Path:
    """Save a front trial's program as <name>.json in ``out_dir`` (default: the user's programs folder) with its meta
    (the study, the trial, the budget, both objectives of it and of the seed trial, the gate; ``extra``: the test
    part, what it was fitted on, the endpoint's label probabilities, the estimate) and its card."""
    from ..experiments.program_card import write_card
    from ..optimize.compile import CompileResult, save_compiled

    meta = _trial_meta(result, trial, program, verdict, name, budget, out_dir, extra or {})
    path = save_compiled(CompileResult(program, meta, verdict), name, out_dir)
    saved = json.loads(path.with_name(f"{name}.meta.json").read_text())
    write_card(saved, result, path.parent)
    return path


def refused_meta(result, trial, verdict, name: str, budget: float | None, extra: dict) -> dict:
    """The meta of a compile that saved nothing (its pick lost to the seed, or was the seed): what its card shows."""
    return {**_trial_meta(result, trial, None, verdict, name, budget, None, extra).model_dump(), "saved": False}


def _trial_meta(result, trial, program, verdict, name: str, budget: float | None, out_dir: Path | None,
                extra: dict):
    """The ``ProgramMeta`` of a study trial (``program``: the program built from it, None when nothing is saved)."""
    from ..optimize.gate import ProgramMeta
    from ..optimize.study.result import SEED_MARK

    seed = result.marked(SEED_MARK)
    ruled = program is not None and program.rule is not None
    rule_compiled = _rule_provenance(trial.params.get("program", SEED_MARK), out_dir) if ruled else None

    def scores(t) -> dict:
        o = t.outcome
        return {"trial": t.number, "balanced_accuracy": o.balanced_accuracy,
                "balanced_accuracy_interval": list(o.balanced_accuracy_interval), "cost": o.cost,
                "cost_interval": list(o.cost_interval), "turn_accuracy": o.turn_accuracy,
                "claim_decisions": o.claim_decisions, "by_dataset": o.by_dataset}

    settings = {"study": result.study, "trial": trial.number, "params": trial.params, "budget": budget,
                "price": result.price, "command": result.command,
                **({"rule_compiled": rule_compiled} if rule_compiled else {}),
                **{k: extra[k] for k in ("label_probabilities", "estimate") if k in extra}}
    return ProgramMeta(
        program=name, model=result.model, model_name=result.model_name, optimizer="study", settings=settings,
        train=result.pool or {}, dev={k: result.data.get(k) for k in ("name", "sha256")} | {
            "dialogues": len(result.data.get("dialogues", [])), "turns": len(result.data.get("turns", []))},
        scores={"base": {"program": "seed", **scores(seed)}, "compiled": scores(trial)}, gate=verdict.as_dict(),
        options=program.options.saved() if program is not None else {},
        rule=program.rule.model_dump(mode="json") if ruled else None,
        demos={n: len(p.demos) for n, p in program.named_predictors()} if program is not None else {},
        cost={"per_judged_turn": trial.cost, "unit": result.price_model.unit}, dspy_version=dspy_version(),
        fitted_on=extra.get("fitted_on"), test_part=extra.get("test_part"))


def fitted_on_of(trial, study, pooled, data_dir: Path | None) -> dict[str, list[str]]:
    """{dataset: dialogue ids} the chosen trial's program was fitted on: the demo pool's dialogues when it reads pool
    demos, and what its starting program's meta says its own fit saw (its ``fitted_on``). Refused (exit 2) if any
    lies in the suite's test part."""
    from ..compiled.files import program_folders
    from ..optimize.compile import FittedOnTestPart, check_fitted_on, fitted_on
    from ..optimize.study import reads_pool

    found: dict[str, set[str]] = {}
    sources: dict[str, dict] = {}
    if pooled is not None and reads_pool(trial.params):
        dialogues, info = pooled
        datasets = _datasets_of(info, data_dir)
        for dialogue in dialogues:
            found.setdefault(datasets.get(dialogue.id, info.get("dataset", "unknown")), set()).add(dialogue.id)
            sources[dialogue.id] = dialogue.source
    start = trial.params.get("program", "seed")
    for folder in (() if start == "seed" else program_folders()):
        path = folder / f"{start}.meta.json"
        if path.is_file():
            for dataset, ids in (json.loads(path.read_text()).get("fitted_on") or {}).items():
                found.setdefault(dataset, set()).update(ids)
            break
    record = {name: sorted(ids) for name, ids in sorted(found.items())}
    try:
        check_fitted_on({"program": start, "fitted_on": record}, sources)
    except FittedOnTestPart as exc:
        raise fail(str(exc)) from None
    return record or fitted_on({})


def _datasets_of(info: dict, data_dir: Path | None) -> dict[str, str]:
    """dialogue id -> dataset, for a pool drawn from the suite (other pools are one dataset: ``info``'s)."""
    from .train_dev import SUITE, _suite_part

    if info.get("dataset") != SUITE:
        return {}
    from ..data.location import data_dir as default_data_dir

    _, parts = _suite_part(f"{SUITE}:{info['part']}", data_dir or default_data_dir())
    return {d.id: dataset for dataset, found in parts.items() for d in found}


def study_pool(seed_program, pooled: tuple[list, dict] | None, threads: int, log) -> tuple:
    """The demo pool from the human annotations of --train, and what a study result records of it."""
    if pooled is None:
        return None, None
    from ..optimize.demos import labeled_pool, pool_hash

    dialogues, info = pooled
    pool = labeled_pool(seed_program, dialogues, threads=threads,
                        on_dialogue=lambda v: log(f"  demo pool: judged the human claims of {v.dialogue_id}"))
    log(f"demo pool: {pool.sizes()}")
    return pool, {"train": info, "sizes": pool.sizes(), "sha256": pool_hash(pool)}


def dspy_version() -> str:
    import dspy

    return dspy.__version__
