"""The --train and --dev dialogues of `vista compile` and `vista study`: ``DATASET[=PATH][:part]`` specs read from the
data folder into two disjoint sets, each with its description; a dev set without gold turn labels is refused
before the first LM call."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path


def train_and_dev(train: str, dev: str, data_dir: Path | None, seed: int, n_train: int | None,
                   n_dev: int | None) -> tuple[tuple[list, dict], tuple[list, dict]]:
    """The --train and --dev dialogues of `vista compile` / `vista study`, each with its description."""
    from ..data.location import data_dir as default_data_dir
    from ..experiments.bench import load_dataset

    data_dir = data_dir or default_data_dir()
    load = functools.cache(lambda dataset, path: load_dataset(dataset, path, None, seed))  # train and dev: one file
    train_part, dev_part = _compile_split(train, data_dir, seed, n_train, load), _compile_split(dev, data_dir, seed,
                                                                                                 n_dev, load)
    overlap = {d.id for d in train_part[0]} & {d.id for d in dev_part[0]}
    if overlap:
        raise ValueError(f"train and dev share {len(overlap)} dialogues (e.g. {sorted(overlap)[0]}); use disjoint "
                         "parts")
    _require_turn_labels(dev_part[0], dev)
    return train_part, dev_part


def _require_turn_labels(dialogues: list, spec: str) -> None:
    """Candidates are scored, and gated against the seed, on gold turn labels: a dev set without any is refused
    before the first LM call."""
    if not any(d.turns[i].gold is not None and d.turns[i].gold.label is not None
               for d in dialogues for i in d.judged_turns):
        raise ValueError(f"--dev {spec}: no judged turn has a gold label to score candidates on; use a dataset with "
                         "turn labels (vista-human, begin, fade, faithdial, ais, rgm-contradictions)")


def _compile_split(spec: str, data_dir: Path, seed: int, n: int | None, load: Callable) -> tuple[list, dict]:
    """DATASET[=PATH][:part] -> (dialogues, description); parts as in ``data.PARTS`` (default all)."""
    from ..data import PARTS, part_of, sample
    from ..experiments.bench import parse_datasets

    head, _, part = spec.rpartition(":") if spec.rsplit(":", 1)[-1] in PARTS else (spec, "", "all")
    [(dataset, path)] = parse_datasets(head, data_dir).items()
    dialogues = part_of(load(dataset, path), part, seed)
    if n is not None and n < len(dialogues):
        dialogues = sample(dialogues, n, seed)
    return dialogues, {"dataset": dataset, "part": part, "path": str(path), "seed": seed}


SUITE = "suite"  # --dev suite:PART: the instrument's labelled turns (issue 48), ``data.suite.load_suite``
NO_POOL = "none"  # --train none: no demo pool, every demo a starting program's own


def is_suite(spec: str) -> bool:
    """``suite`` or ``suite:PART``: the instrument's suite, not a dataset."""
    return spec == SUITE or spec.startswith(f"{SUITE}:")


def _suite_part(spec: str, data_dir: Path) -> tuple[str, dict[str, list]]:
    """(part, {dataset: its dialogues of that part}) of a ``suite[:PART]`` spec (default part: compile)."""
    from ..data.suite import load_suite
    from ..experiments.bench import suite_paths

    part = spec.partition(":")[2] or "compile"
    return part, load_suite(suite_paths(data_dir), part)


def default_train(dev: str) -> str:
    """The demo pool a study builds when --train is not given: with a --dev of the suite, the compile part's
    dialogues outside --dev (``vista-human:pool`` overlaps the suite's compile part); else ``vista-human:pool``."""
    return f"{SUITE}:compile" if is_suite(dev) else "vista-human:pool"


def objective_data(spec: str, data_dir: Path | None, seed: int, n: int | None):
    """The labelled dialogues a priced study judges every trial on (``optimize.study.ObjectiveData``): the suite's
    part (``suite:compile``) or ``DATASET[=PATH][:part]``; ``n``: a seeded sample of at most that many dialogues
    (of the suite's part, each dataset keeping its share, so a study's trials fit in hours on 2 cores)."""
    from ..data.location import data_dir as default_data_dir
    from ..experiments.bench import load_dataset
    from ..optimize.study import ObjectiveData

    if is_suite(spec):
        part, parts = _suite_part(spec, data_dir or default_data_dir())
        if n is None or n >= sum(map(len, parts.values())):
            return ObjectiveData.of(f"{SUITE}:{part}", parts)
        return ObjectiveData.of(f"{SUITE}:{part}[{n} dialogues, seed {seed}]", sample_parts(parts, n, seed))
    data_dir = data_dir or default_data_dir()
    load = functools.cache(lambda dataset, path: load_dataset(dataset, path, None, seed))
    dialogues, info = _compile_split(spec, data_dir, seed, n, load)
    _require_turn_labels(dialogues, spec)
    return ObjectiveData.of(spec, {info["dataset"]: dialogues})


def sample_parts(parts: dict[str, list], n: int, seed: int) -> dict[str, list]:
    """A seeded sample of ``n`` dialogues of {dataset: dialogues}: each dataset's share of ``n`` (largest remainders),
    the dialogues of each drawn at random and kept in their order."""
    import random

    total = sum(map(len, parts.values()))
    quotas = {name: n * len(dialogues) / total for name, dialogues in parts.items()}
    counts = {name: int(q) for name, q in quotas.items()}
    for name in sorted(quotas, key=lambda k: counts[k] - quotas[k])[:n - sum(counts.values())]:
        counts[name] += 1
    rng = random.Random(seed)
    return {name: [dialogues[i] for i in sorted(rng.sample(range(len(dialogues)), counts[name]))]
            for name, dialogues in parts.items()}


def pool_dialogues(spec: str, data_dir: Path | None, seed: int, n: int | None,
                   dev: frozenset[str] = frozenset()) -> tuple[list, dict] | None:
    """The dialogues a priced study builds its demo pool from (None for ``--train none``). ``suite:PART``: the
    suite part's dialogues outside the study's ``dev`` ids (with ``--dev suite:compile --n-dev N``, the compile
    part's dialogues the sample left out: the pool is fitted on the compile part, never on the test part)."""
    from ..data import sample
    from ..data.location import data_dir as default_data_dir
    from ..experiments.bench import load_dataset

    if spec == NO_POOL:
        return None
    data_dir = data_dir or default_data_dir()
    if is_suite(spec):
        part, parts = _suite_part(spec, data_dir)
        dialogues = [d for found in parts.values() for d in found if d.id not in dev]
        if n is not None and n < len(dialogues):
            dialogues = sample(dialogues, n, seed)
        return dialogues, {"dataset": SUITE, "part": part, "excluding": "the --dev dialogues", "seed": seed}
    load = functools.cache(lambda dataset, path: load_dataset(dataset, path, None, seed))
    return _compile_split(spec, data_dir, seed, n, load)


def pool_spec(info: dict) -> str:
    """The --train spec that ``pool_dialogues`` described as ``info`` (a study result records it): how a program
    rebuilt from a trial finds its demo pool's dialogues again."""
    if info.get("dataset") == SUITE:
        return f"{SUITE}:{info['part']}"
    return f"{info.get('dataset')}={info.get('path')}:{info.get('part', 'all')}"
