#!/usr/bin/env bash
# The project's held-out figures, reproducible anywhere with a network: VISTA's human re-annotation fetched from its
# public home (sha256-checked), the held-out half cut from it on this machine (the 70 conversations no choice of the
# project saw), judged end to end by the program that ships for MODEL and by the seed program, and printed as the
# turn table and the paired table (turns and matched claims, exact McNemar against the seed).
# Usage: benchmarks/heldout.sh [MODEL] [extra vista benchmark options, e.g. --api-base URL or --program P]
#   MODEL: local (the default: the shipped compiled/local.json), or a `vista models` name / litellm string (its
#          compiled program if one ships, else the seed: then pass --program P to compare one).
#   VISTA_DATA_FROM=URL|DIR: fetch from a mirror or a local copy (`vista data get --from`).
#   OUT: the benchmark folder (default vista-runs/heldout__MODEL); rerunning resumes every run.
set -euo pipefail
MODEL=${1:-local}
shift || true
OUT=${OUT:-vista-runs/heldout__${MODEL//\//_}}
vista data get vista-human:heldout-half ${VISTA_DATA_FROM:+--from "$VISTA_DATA_FROM"}
vista benchmark --datasets vista-human:heldout-half --systems vista,seed --n 0 --model "$MODEL" --out "$OUT" "$@"
