"""Write the instrument's committed sampling, ``vista_dspy/data/suite.json`` (run once; rerunning it with the same
data and arguments writes the same bytes).

    python benchmarks/make_suite.py --data-dir ../shared/data

Per benchmark (BEGIN's WoW test file, FADE's human-verified subset, FaithDial's data-audit files): the rows whose
response occurs in VISTA's human re-annotation (either half; ``vista_human_eval/exclude_sha256.txt``) are dropped,
then ``--per-label`` rows of each gold label are drawn with ``random.Random(seed)`` (all of a label that has fewer).
The annotated dev half (``vista_human_eval/dev.json``) goes in whole. AIS is left out: its rows cannot be joined to
their history and passage here (Wizard of Wikipedia's ``test_random_split.json`` is not available offline).
Each dataset records its ids, its pinned source files' sha256 (the fetch registry), the sha256 of the selected
dialogues' content, and per part the dialogues, judged turns and labels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

from vista_dspy.data import load_dialogues
from vista_dspy.data.benchmarks import load_benchmark
from vista_dspy.data.sources import DATASETS as SOURCES
from vista_dspy.data.suite import SUITE_FILE, content_sha256, group_id, part_of_group

BENCHMARK_PATHS = {"begin": "begin", "fade": "fade", "faithdial-audit": "faithdial/data-audit"}
HUMAN = ("vista-human", "vista_human_eval/dev.json")
OUT = Path(__file__).resolve().parent.parent / "vista_dspy" / "data" / SUITE_FILE


def normalised_sha256(text: str) -> str:
    """The hash of exclude_sha256.txt (its first line says how texts are normalised)."""
    text = re.sub(r"[^\w\s]|_", " ", text.lower())
    return hashlib.sha256(re.sub(r"\s+", " ", text).strip().encode("utf-8")).hexdigest()


def labels(dialogue) -> list[str]:
    return [dialogue.turns[i].gold.label for i in dialogue.judged_turns]


def record(name: str, dialogues, **extra) -> dict:
    parts = {}
    for part in ("compile", "test"):
        mine = [d for d in dialogues if part_of_group(group_id(d)) == part]
        parts[part] = {"dialogues": len(mine), "judged_turns": sum(len(d.judged_turns) for d in mine),
                       "labels": dict(sorted(Counter(label for d in mine for label in labels(d)).items()))}
    source = SOURCES[name]
    return {"source": source.source,
            "files_sha256": {f.path: f.sha256 for f in source.files} or
                            {b.path: b.sha256 for b in source.built},
            **extra, "content_sha256": content_sha256(dialogues), "parts": parts,
            "ids": [d.id for d in dialogues]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--per-label", type=int, default=100)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    excluded = {line.strip() for line in (args.data_dir / "vista_human_eval/exclude_sha256.txt").read_text()
                .splitlines() if line.strip() and not line.startswith("#")}
    datasets = {}
    for name, rel in BENCHMARK_PATHS.items():
        loaded = load_benchmark(name, args.data_dir / rel)
        kept = [d for d in loaded if not any(normalised_sha256(d.turns[i].text) in excluded for i in d.judged_turns)]
        rng = random.Random(f"{args.seed}:{name}")
        chosen = []
        for label in ("faithful", "hallucinated"):
            side = sorted((d for d in kept if labels(d) == [label]), key=lambda d: d.id)
            chosen += rng.sample(side, min(args.per_label, len(side)))
        chosen.sort(key=lambda d: d.id)
        datasets[name] = record(name, chosen, loaded=len(loaded), excluded_as_in_human_annotation=len(loaded) - len(kept),
                                sampling=f"random.Random('{args.seed}:{name}').sample of up to {args.per_label} per "
                                         "label, sorted by id")
    human = load_dialogues(args.data_dir / HUMAN[1], "vista")
    datasets[HUMAN[0]] = record(HUMAN[0], [d for d in human if d.judged_turns], sampling="every dialogue with a judged turn")
    suite = {"name": "vista-suite-v1",
             "split": "part = ('compile', 'test')[sha256(group id)[0] % 2]; group id = dataset:conversation for rows "
                      "that share a conversation (FADE), else the dialogue id",
             "command": f"python benchmarks/make_suite.py --data-dir DATA --per-label {args.per_label} --seed {args.seed}",
             "datasets": datasets}
    args.out.write_text(json.dumps(suite, indent=1) + "\n")
    for name, rec in datasets.items():
        print(name, {p: (v["judged_turns"], v["labels"]) for p, v in rec["parts"].items()})
    total = sum(v["judged_turns"] for rec in datasets.values() for v in rec["parts"].values())
    print(f"{args.out}: {total} judged turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
