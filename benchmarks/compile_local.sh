#!/usr/bin/env bash
# `vista compile` for an embedded model: a priced study on the suite's compile part (a seeded sample of --n-dev
# dialogues), the most accurate front trial within the budget, gated against the seed, the test part read once. The
# program (if it passes), its meta and card go to benchmarks/programs/ (generated, not tracked), with the run's log;
# OUT=vista_dspy/compiled makes the shipped one, the same command. A program whose demos come from the annotated
# data must not be committed (tests/test_no_dataset_text.py fails on it). The study is stored and every LM answer
# cached: a rerun resumes. Extra arguments go to `vista compile`.
#   bash benchmarks/compile_local.sh local --n-dev 60 --budget 2          # Qwen2.5-Coder-1.5B (the [local] extra)
#   bash benchmarks/compile_local.sh local-0.5b --n-dev 60 --port 8766    # its 0.5B sibling (the [draft] extra)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-local}
shift || true
out=${OUT:-benchmarks/programs}
mkdir -p "$out"
start=$(date +%s)
vista compile --model "$model" --out-dir "$out" "$@" 2>&1 | tee "$out/$model.log"
echo "compile of $model: $(( $(date +%s) - start )) s of wall time" | tee -a "$out/$model.log"
