#!/usr/bin/env bash
# `vista compile` for each of the paper's eight models this machine can reach, one after the other (a priced study on
# the suite's compile part, the most accurate front trial within the budget, gated against the seed, the test part
# read once); each writes its program (if it passes), meta and card into your programs folder. The others are
# skipped with a line saying what they need. Hosted models need their key (OPENAI_API_KEY, DEEPSEEK_API_KEY); an
# open-weights model needs its own endpoint:
#   VISTA_API_BASE_LLAMA_3_1_8B=http://gpu-box:8000/v1 VISTA_API_BASE_QWEN3_8B=http://gpu-box:8001/v1 \
#       bash benchmarks/compile_paper_models.sh --budget 2.5
# Extra arguments go to every `vista compile` (e.g. --budget, --trials, --n-dev, --out-dir).
set -euo pipefail
python - <<'PY' | while IFS=$'\t' read -r name endpoint; do
from vista_dspy.lm.models import configured_models

ready, skipped = configured_models()
for name, missing in skipped:
    print(f"skip {name}: {missing}", file=__import__("sys").stderr)
for name, endpoint in ready:
    print(f"{name}\t{endpoint or ''}")
PY
  vista compile --model "$name" ${endpoint:+--api-base "$endpoint"} "$@"
done
