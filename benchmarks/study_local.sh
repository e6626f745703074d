#!/usr/bin/env bash
# The priced studies of the embedded judges (issue 51): every trial a candidate program judged on the suite's compile
# part, measured on balanced turn accuracy and on the server's own seconds per judged turn. Resumable: the optuna
# store lives outside the repository (~/.cache/vista-dspy/studies/local-SIZE.db, or $VISTA_CACHE_DIR/studies), so a
# rerun continues where the last one stopped (raise TRIALS to add trials); on a machine whose store lacks the study
# (a new machine, a cleared cache) the study is first rebuilt from its committed result (--from-result). Each run exports the study's result as
# committed data, benchmarks/fronts/local-SIZE.json (choices, both objectives, intervals; no dataset text), and
# writes its page under benchmarks/studies/ (generated, not tracked).
#   bash benchmarks/study_local.sh 1.5b 12      # the embedded judge, 12 trials in all
#   bash benchmarks/study_local.sh 0.5b 12      # Qwen2.5-Coder-0.5B-Instruct (the [draft] extra)
#   bash benchmarks/study_local.sh 1.5b 12 --n-dev 60   # trials on a seeded 60-dialogue sample of the compile part
#     (each dataset keeps its share): the seed's trial alone takes ~2.5 h on all 341 turns on 2 cores
# The two fronts side by side, from the committed results alone (no LM):
#   vista study-page benchmarks/fronts/local-1.5b.json benchmarks/fronts/local-0.5b.json \
#       --out benchmarks/studies/fronts.html
# A program within a budget (seconds per judged turn), gated against the seed:
#   vista compile --study benchmarks/fronts/local-1.5b.json --budget 4 --name local-budget-4
set -euo pipefail
size=${1:-1.5b}
trials=${2:-12}
shift $(( $# < 2 ? $# : 2 ))
cd "$(dirname "$0")/.."  # the repository's root: the study result records the command with these relative paths
model=local
if [ "$size" = "0.5b" ]; then
  model=local-0.5b
fi
mkdir -p benchmarks/fronts benchmarks/studies
result="benchmarks/fronts/local-$size.json"
from=()
if [ -f "$result" ]; then
  from=(--from-result "$result")
fi
vista study --model "$model" --trials "$trials" --study-name "local-$size" --dev suite:compile \
    --export "$result" --report "benchmarks/studies/local-$size.html" "${from[@]}" "$@"
