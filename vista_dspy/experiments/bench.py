"""The paper's experiments with one LM: datasets x systems (x VISTA ablations) -> resumable runs -> tables.

Layout of a benchmark directory::

    benchmark.json                  the plan (datasets with paths, systems, n, seed, model) and every table
    table.csv / table.md            turn accuracy per dataset x system, McNemar marks against VISTA
    abstention.csv, contradiction.csv  (when CoCoNot / RGM-Contradictions were run)
    table.md's paired sections      (when the seed system judged VISTA's human re-annotation: ``paired``)
    runs/<dataset>/<system>/        an ordinary `vista evaluate` output directory (run.json, verdicts.jsonl,
                                    summary.json) plus timing.json; rerunning resumes every one of them

Every system of a dataset judges the same sampled dialogues, so the McNemar tests pair the same turns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..baselines import SYSTEMS as BASELINES
from ..baselines import baseline
from ..data import load_dialogues
from ..data.benchmarks import BENCHMARKS, last_report, load_benchmark, sample
from ..options import CLAIM_CALLS, DEFAULT_CLAIM_CALLS, JudgeOptions
from ..program import Vista
from ..run.runner import RunResult, evaluate, run_settings
from ..schema import Dialogue, DialogueVerdict
from ..stages import CallFailures, StagedModule
from .paired import write_paired
from .tables import PLAN, SEED_SYSTEM, TIMING, write_tables

# name -> path under the data directory (``--data-dir``); "vista-human" is VISTA's own annotated format.
DATASETS: dict[str, str] = {
    "vista-human": "vista_human_eval/dev.json",
    "vista-human:dev-half": "vista_human_eval/dev.json",  # the same file, by its explicit name
    "vista-human:heldout-half": "vista_human_eval/heldout.json",  # made by `vista data get` from the authors' file
    "begin": "begin",
    "fade": "fade",
    "faithdial": "faithdial/data/test.json",
    "faithdial-audit": "faithdial/data-audit",
    "ais": "ais",
    "coconot": "coconot",
    "rgm-contradictions": "rgm_contradiction",
}
SYSTEM_NAMES = ("vista", "vista-ctx", SEED_SYSTEM, "evidence", "factscore", "factscore-nosplit", "judge")
# VISTA ablations: run as extra systems named vista-<ablation>.
ABLATIONS: dict[str, dict[str, Any]] = {
    "no-ac": {"accumulate": False},
    "no-history": {"history_in_decompose": False},
    "zero-shot": {"zero_shot": True},
    "contradiction-check": {"check_contradictions": True},
}
# Not ablations of the paper: the judging modes other than the default, for accuracy and cost.
ABLATIONS.update({mode: {"claim_calls": mode} for mode in CLAIM_CALLS if mode != DEFAULT_CLAIM_CALLS})
ABLATIONS["batched-dialogue"] = {"claim_calls": "batched", "decompose_calls": "per-dialogue"}  # the fewest calls
for _changes in ABLATIONS.values():  # each is a valid change of the judging options (raises at import otherwise)
    JudgeOptions().replace(**_changes)


def parse_datasets(spec: str, data_dir: Path) -> dict[str, Path]:
    """``begin,fade=/some/file.csv`` -> {name: path}; a name alone uses its place under ``data_dir``."""
    chosen: dict[str, Path] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, path = item.partition("=")
        if name not in DATASETS:
            raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
        chosen[name] = Path(path) if path else dataset_path(name, data_dir)
    if not chosen:
        raise ValueError("no dataset given")
    return chosen


def suite_paths(data_dir: Path, names: Sequence[str] | None = None) -> dict[str, Path]:
    """Where each dataset of the instrument (``data/suite.json``) is read from; ``names``: only those."""
    from ..data.suite import suite_datasets

    known = suite_datasets()
    unknown = [n for n in names or () if n.strip() not in known]
    if unknown:
        raise ValueError(f"not a dataset of the suite: {', '.join(unknown)}; its datasets: {', '.join(known)}")
    wanted = [n.strip() for n in names] if names else known
    return {name: dataset_path(name, data_dir) for name in known if name in wanted}


def dataset_path(name: str, data_dir: Path) -> Path:
    """The cache after `vista data get`, else ``data_dir``; missing from both: ``DatasetMissing`` ("run `vista data
    get NAME`"). A name the fetcher does not know keeps its place under ``data_dir``."""
    from ..data.fetch import DATASETS as FETCHED
    from ..data.fetch import dataset_file

    return dataset_file(name, data_dir) if name in FETCHED else data_dir / DATASETS[name]


def system_names(systems: Sequence[str], ablations: Sequence[str]) -> list[str]:
    unknown = [s for s in systems if s not in SYSTEM_NAMES] + [a for a in ablations if a not in ABLATIONS]
    if unknown:
        raise ValueError(f"unknown system or ablation {', '.join(unknown)}; systems: {', '.join(SYSTEM_NAMES)}; "
                         f"ablations: {', '.join(ABLATIONS)}")
    names = list(dict.fromkeys(systems))
    return names + [f"vista-{a}" for a in dict.fromkeys(ablations)]


def build_system(name: str, *, program: str | None = None, short_answer_tokens: int | None = None,
                 changes: dict[str, Any] | None = None) -> StagedModule:
    """A judge by benchmark name: vista, vista-ctx, vista-<ablation>, seed, evidence, or a baseline. VISTA systems
    load ``program`` (seed: the seed program) with its saved options; ``changes`` (judging options given by the caller)
    win over them, and an ablation's or vista-ctx's own change wins over both; a baseline takes those it has (its
    reading of the sources). ``evidence``: ``program``'s claims decided by the evidence
    cues alone (its rule's evidence model, or the shipped evidence rule when it has none): Decompose is the only
    LM call."""
    if name in BASELINES:
        return baseline(name, short_answer_tokens=short_answer_tokens, changes=changes)
    if name == "evidence":
        return Vista.evidence_from_program(program, short_answer_tokens=short_answer_tokens, **dict(changes or {}))
    options: dict[str, Any] = dict(changes or {})
    if name == SEED_SYSTEM:
        from ..compiled.files import SEED_PROGRAM

        return Vista.from_program(SEED_PROGRAM, short_answer_tokens=short_answer_tokens, **options)
    if name == "vista-ctx":
        options["use_context"] = True
    elif name != "vista":
        ablation = name.removeprefix("vista-")
        if not name.startswith("vista-") or ablation not in ABLATIONS:
            raise ValueError(f"unknown system {name!r}")
        options.update(ABLATIONS[ablation])
    return Vista.from_program(program, short_answer_tokens=short_answer_tokens, **options)


def load_dataset(name: str, path: Path, n: int | None, seed: int) -> list[Dialogue]:
    """The seeded sample of ``n`` dialogues of ``name`` (all of them when ``n`` is None or larger)."""
    if name == "vista-human" or name.startswith("vista-human:"):
        dialogues = load_dialogues(path, "vista")
        return dialogues if n is None or n >= len(dialogues) else sample(dialogues, n, seed)
    if name not in BENCHMARKS:
        raise ValueError(f"unknown dataset {name!r}")
    return load_benchmark(name, path, n=n, seed=seed)


@dataclass
class Plan:
    datasets: dict[str, Path]
    systems: list[str]
    n: int | None = 50
    seed: int = 0
    model: str = ""
    program: str | None = None
    claim_calls: str | None = None  # None: the program's saved judging mode
    settings: dict[str, Any] = field(default_factory=dict)  # model settings shared by every run
    label_probabilities: bool = True  # the endpoint is asked for label probabilities
    suite: str | None = None  # the instrument's part ('compile', 'test', 'all'): its committed ids, not a sample
    evidence: str | None = None  # how every system reads the sources (``options.EVIDENCE_READINGS``); None: its own

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["datasets"] = {k: str(v) for k, v in self.datasets.items()}
        return data


@dataclass
class BenchmarkResult:
    out_dir: Path
    runs: dict[tuple[str, str], RunResult]
    tables: dict[str, pd.DataFrame]
    interrupted: bool = False
    paired: dict[str, dict[str, Any]] = field(default_factory=dict)  # experiments.paired: against the seed


def run_benchmark(
    plan: Plan,
    backend: Any,
    out_dir: Path,
    *,
    short_answer_tokens: int | None = None,
    on_start: Callable[[str, str, int], None] | None = None,
    on_done: Callable[[DialogueVerdict], None] | None = None,
    loaded: Callable[[str, list[Dialogue]], None] | None = None,
    retry_errors: bool = True,
    failures: CallFailures | None = None,
) -> BenchmarkResult:
    """Run every system of ``plan`` on every dataset (dataset by dataset) and write the tables.

    Each (dataset, system) pair is an ordinary resumable run under ``runs/`` on ``backend`` (as
    ``runner.evaluate`` takes it); a rerun of the same plan judges only what is missing. KeyboardInterrupt keeps
    what is finished and returns with ``interrupted=True``. ``retry_errors`` and ``failures``: as for
    ``runner.evaluate`` (an endpoint that goes down stops the whole benchmark).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if plan.suite is not None:
        from ..data.suite import load_suite

        samples = load_suite(plan.datasets, plan.suite)
    else:
        samples = {name: load_dataset(name, path, plan.n, plan.seed) for name, path in plan.datasets.items()}
    loads = {name: load_record(name, dialogues) for name, dialogues in samples.items()}
    for name, dialogues in samples.items():
        if loaded is not None:
            loaded(name, dialogues)
    _record_plan(out_dir, plan, loads)
    runs: dict[tuple[str, str], RunResult] = {}
    interrupted = False
    changes: dict[str, Any] = {"label_probabilities": plan.label_probabilities}
    if plan.claim_calls is not None:
        changes["claim_calls"] = plan.claim_calls
    if plan.evidence is not None:
        changes["evidence"] = plan.evidence
    for dataset, dialogues in samples.items():
        for system in plan.systems:
            judge = build_system(system, program=plan.program, short_answer_tokens=short_answer_tokens,
                                 changes=changes)
            run_dir = out_dir / "runs" / dataset / system
            settings = run_settings(judge, input=f"{dataset}:{plan.datasets[dataset]}", n=plan.n, seed=plan.seed,
                                    **plan.settings)
            if on_start is not None:
                on_start(dataset, system, len(dialogues))
            started = time.perf_counter()
            result = evaluate(dialogues, judge, backend, out_dir=run_dir, settings=settings, on_done=on_done,
                              retry_errors=retry_errors, failures=failures)
            _add_timing(run_dir, time.perf_counter() - started, len(result.verdicts) - result.resumed)
            runs[dataset, system] = result
            if result.interrupted:
                interrupted = True
                break
        if interrupted:
            break
    tables = write_tables(out_dir)
    return BenchmarkResult(out_dir=out_dir, runs=runs, tables=tables, interrupted=interrupted,
                           paired=write_paired(out_dir))


def load_record(name: str, dialogues: list[Dialogue]) -> dict[str, Any]:
    """What loading dataset ``name`` kept and skipped: rows kept, rows skipped per reason (a benchmark loader's
    report; VISTA's own format skips nothing) and the dialogues sampled from them."""
    if name in BENCHMARKS:
        report = last_report(name)
        return {"kept": report.kept, "skipped": dict(report.skipped.most_common()), "sampled": len(dialogues)}
    return {"kept": len(dialogues), "skipped": {}, "sampled": len(dialogues)}


def _record_plan(out_dir: Path, plan: Plan, loads: dict[str, dict[str, Any]] | None = None) -> None:
    """Append the plan to benchmark.json's list (several commands may fill one directory; tables cover all), and
    record what each dataset's loader kept and skipped (``loaded``, the latest load of each)."""
    path = out_dir / PLAN
    document = json.loads(path.read_text()) if path.exists() else {}
    plans = document.setdefault("plans", [])
    if plan.to_json() not in plans:
        plans.append(plan.to_json())
    document.setdefault("loaded", {}).update(loads or {})
    path.write_text(json.dumps(document, indent=2) + "\n")


def _add_timing(run_dir: Path, seconds: float, judged: int) -> None:
    """Wall time spent judging, summed over the sessions that judged something (cached resumes add nothing)."""
    path = run_dir / TIMING
    timing = json.loads(path.read_text()) if path.exists() else {"seconds": 0.0, "dialogues": 0}
    if judged:
        timing = {"seconds": timing["seconds"] + seconds, "dialogues": timing["dialogues"] + judged}
        path.write_text(json.dumps(timing) + "\n")
