#!/usr/bin/env bash
# The quick start's first command with the program of each named trial of a priced study (issue 51: it should read at
# most 1,500 prompt tokens in all). Each trial is rebuilt from the committed study result (`vista compile --study
# RESULT --trial N`, kept whatever its gate says) and judges examples/quickstart.json as on a fresh machine: no answer
# cache, no saved KV slots (VISTA_WARM_START_MB=0). One line per trial: its turn labels, VISTA score, LM calls, prompt
# tokens (in all and per stage), written tokens and wall time. Run the trials in one invocation to compare their
# times side by side; the token counts do not depend on the machine.
#   bash benchmarks/quickstart_trials.sh benchmarks/fronts/local-1.5b.json 3 4 13 15 16
#   bash benchmarks/quickstart_trials.sh benchmarks/fronts/local-1.5b.json shipped   # the default as it ships
set -euo pipefail
result=$1
shift
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for trial in "$@"; do
  if [ "$trial" = "shipped" ]; then
    program=()
  else
    vista compile --study "$result" --trial "$trial" --name "trial-$trial" --out-dir "$work" --always-save \
        > "$work/compile-$trial.log" 2>&1 || { cat "$work/compile-$trial.log" >&2; exit 2; }
    program=(--program "$work/trial-$trial.json")
  fi
  start=$(date +%s.%N)
  VISTA_WARM_START_MB=0 vista evaluate examples/quickstart.json --no-cache "${program[@]}" --out "$work/run-$trial" \
      > "$work/run-$trial.log" 2>&1 || { cat "$work/run-$trial.log" >&2; exit 2; }
  end=$(date +%s.%N)
  python - "$trial" "$work/run-$trial/summary.json" "$start" "$end" <<'EOF'
import json
import sys

trial, path, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
summary = json.load(open(path))
total, stages = summary["usage"]["total"], summary["usage"]["by_stage"]
per_stage = ", ".join(f"{stage} {u['prompt_tokens']:,} in {u['calls']}" for stage, u in stages.items())
labels = ", ".join(f"{label} {n}" for label, n in summary["turn_labels"].items())
print(f"trial {trial}: {labels}; VISTA score {summary['vista_score']:.1%}; {total['calls']} LM calls, "
      f"{total['prompt_tokens']:,} prompt tokens ({per_stage}), {total['completion_tokens']} written; "
      f"{end - start:.0f} s wall")
EOF
done
