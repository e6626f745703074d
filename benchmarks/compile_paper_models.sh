#!/usr/bin/env bash
# The compilation protocol for the paper's eight models in one command: every model this machine can reach is
# compiled with the claims protocol (demos, calibration and judging mode chosen on the human claims of
# vista-human:train, cross-fitted by dialogue) and gated on vista-human:dev; a program that passes the gate is
# written to vista_dspy/compiled/<name>.json (+ .meta.json). The others are skipped with a line saying what they
# need. Hosted models need their key (OPENAI_API_KEY, DEEPSEEK_API_KEY); an open-weights model needs its own endpoint:
#   VISTA_API_BASE_LLAMA_3_1_8B=http://gpu-box:8000/v1 VISTA_API_BASE_QWEN3_8B=http://gpu-box:8001/v1 \
#       bash benchmarks/compile_paper_models.sh
# A model whose endpoint gives no token log-probabilities (gpt-5) gets no calibration. Extra arguments go to
# `vista compile` (e.g. --optimizer random-search --budget 8 --train vista-human:pool --dev vista-human:select).
set -euo pipefail
vista compile --model all-configured "$@"
