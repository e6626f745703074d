#!/usr/bin/env bash
# The compilation protocol for the paper's eight models in one command: every model this machine can reach is
# compiled on the annotated dev half (demos from its `pool` part, chosen on `select`; `dev` stays held out) into vista_dspy/compiled/<name>.json
# (+ .meta.json); the others are skipped with a line saying what they need. Hosted models need their key
# (OPENAI_API_KEY, DEEPSEEK_API_KEY); an open-weights model needs its own endpoint, e.g.
#   VISTA_API_BASE_LLAMA_3_1_8B=http://gpu-box:8000/v1 VISTA_API_BASE_QWEN3_8B=http://gpu-box:8001/v1 \
#       bash benchmarks/compile_paper_models.sh
# Extra arguments go to `vista compile` (e.g. --optimizer random-search --budget 8).
set -euo pipefail
vista compile --model all-configured --train vista-human:pool --dev vista-human:select --optimizer labeled "$@"
