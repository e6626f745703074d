#!/usr/bin/env bash
# Verdicts of the annotated dev file in every judging mode against the fake OpenAI server (vista_dspy.lm.fake), one
# file per mode, lines sorted by dialogue id: a refactoring must leave them byte-identical. (The modes of the shipped
# rule programs came with wave 7: compare them only with a snapshot that has them.)
#   bash benchmarks/verdict_snapshot.sh DIR        then: diff -r DIR_BEFORE DIR_AFTER
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: verdict_snapshot.sh OUT_DIR}
data=${VISTA_DATA_DIR:-../shared/data}/vista_human_eval/dev.json
mkdir -p "$out"
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
python -m vista_dspy.lm.fake.server > "$work/url" & server=$!
for _ in $(seq 300); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(cat "$work/url")
run() {  # NAME, then vista evaluate options
    local name=$1; shift
    vista --cache-dir "$work/cache" evaluate "$data" --model hosted_vllm/fake --api-base "$url" --no-cache \
        --out "$work/$name" --json "$@" > /dev/null 2> "$work/$name.log" || { cat "$work/$name.log"; exit 1; }
    python - "$work/$name/verdicts.jsonl" "$out/$name.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
lines.sort(key=lambda line: json.loads(line)["dialogue_id"])
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
PY
    echo "$name: $(wc -l < "$out/$name.jsonl") dialogues"
}
run per-claim
run per-claim-async --concurrency 4
run batched --claim-calls batched
run joint --claim-calls joint --concurrency 4
run batched-dialogue --claim-calls batched --decompose-calls per-dialogue --concurrency 4
run given-claims --judge-given-claims
run ctx-reasoning --context --reasoning verify,categorize --contradiction-check
run ablations --no-accumulate --no-history --zero-shot
run factscore --system factscore
run factscore-nosplit --system factscore-nosplit --concurrency 4
run judge --system judge
# The shipped programs (the fake server gives no label probabilities: each rule decides with its evidence-only model)
# and the tier with no LM call.
run program-local --program local
run program-evidence --program evidence
run no-lm --system evidence --units sentences --program local
