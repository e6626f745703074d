#!/usr/bin/env bash
# `vista compile` for an embedded model with its default optimizer (the decision rule over the judge's label
# probabilities and the claims' evidence, fitted on vista-human:train judged end to end, cross-fitted by dialogue)
# gated on vista-human:dev, which no choice sees; extra arguments go to `vista compile` (e.g. --optimizer claims).
# No run of this script in its current form is recorded in RESULTS.md (its "Compiling for the embedded local
# model" section ran `--optimizer labeled` with an earlier version). The candidate and the run's log are kept
# under benchmarks/programs/ (generated, not tracked) whatever the gate says (benchmarks/compiled_table.py reads it); it ships as
# vista_dspy/compiled/<model>.json only if it passed. A program whose demos come from the annotated data must not
# be committed (tests/test_no_dataset_text.py fails on it). Every LM answer is cached: a rerun resumes.
#   bash benchmarks/compile_local.sh local              # Qwen2.5-Coder-1.5B (the [local] extra)
#   bash benchmarks/compile_local.sh local-0.5b --port 8766   # its 0.5B sibling (the [draft] extra)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-local}
shift || true
mkdir -p benchmarks/programs
start=$(date +%s)
vista compile --model "$model" --always-save --out-dir benchmarks/programs "$@" 2>&1 | tee "benchmarks/programs/$model.log"
echo "compile of $model: $(( $(date +%s) - start )) s of wall time" | tee -a "benchmarks/programs/$model.log"
python - "$model" <<'PY'
import json, shutil, sys
from pathlib import Path

from vista_dspy.compiled import compiled_dir

name = sys.argv[1]
meta = json.loads(Path(f"benchmarks/programs/{name}.meta.json").read_text())
if meta["gate"].get("passed"):
    for suffix in (".json", ".meta.json"):
        shutil.copy(f"benchmarks/programs/{name}{suffix}", compiled_dir() / f"{name}{suffix}")
    print(f"the gate passed: shipped as {compiled_dir() / (name + '.json')}")
else:
    print("the gate failed: nothing ships; the seed program stays")
PY
