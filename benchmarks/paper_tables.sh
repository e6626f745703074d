#!/usr/bin/env bash
# The paper's comparisons with one model (default: the embedded local model), as recorded in RESULTS.md.
# Usage: benchmarks/paper_tables.sh [OUT_DIR] [extra vista benchmark options, e.g. --model gpt-4o]
# Resumable: rerun the same command to finish an interrupted run.
set -euo pipefail
OUT=${1:-vista-runs/bench-local}
shift || true
vista benchmark --datasets begin,fade,faithdial-audit --systems vista,factscore,factscore-nosplit,judge --n 24 --claim-calls per-claim --no-cache --out "$OUT" "$@"
vista benchmark --datasets coconot --systems vista,judge --n 20 --claim-calls per-claim --no-cache --out "$OUT" "$@"
vista benchmark --datasets rgm-contradictions --systems vista,vista-ctx,judge --n 20 --claim-calls per-claim --no-cache --out "$OUT" "$@"
vista report "$OUT"
