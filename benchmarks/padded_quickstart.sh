#!/usr/bin/env bash
# The quick start with each reference padded to 5,000 and 20,000 words of unrelated WoW knowledge passages (BEGIN's
# WoW test file, half before and half after the true passage: benchmarks/growth.py's padding), judged live by the
# shipped default and by the seed (the paper's method) as users run them, beside the unpadded example: per run the
# turn labels, the claims' categories, LM calls, prompt tokens and prompt tokens per call (issues 60 and 63).
# Usage: bash benchmarks/padded_quickstart.sh [OUT]   (the embedded model, alone on the cores; about 6 minutes)
set -euo pipefail
OUT=${1:-vista-runs/padded-quickstart}
mkdir -p "$OUT"
python - "$OUT" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
import growth  # noqa: E402

from vista_dspy.data import load_dialogues  # noqa: E402
from vista_dspy.data.location import data_dir  # noqa: E402

out = Path(sys.argv[1])
passages = growth.knowledge_passages(growth.begin_rows(data_dir()))
dialogue = load_dialogues(Path("examples/quickstart.json"))[0]
for words in (5_000, 20_000):
    (out / f"qs-{words}.jsonl").write_text(growth.with_sources(dialogue, words, passages).model_dump_json() + "\n")
EOF
cp examples/quickstart.json "$OUT/qs-0.json"
for program in local seed; do
    for words in 0 5000 20000; do
        input="$OUT/qs-$words.jsonl"; [ "$words" = 0 ] && input="$OUT/qs-0.json"
        vista evaluate "$input" --program "$program" --no-cache --out "$OUT/$program-$words" --no-show-claims >/dev/null 2>&1
        python - "$OUT/$program-$words" "$program" "$words" <<'EOF'
import json
import sys
from pathlib import Path

run, program, words = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
usage = json.loads((run / "summary.json").read_text())["usage"]["total"]
verdict = json.loads((run / "verdicts.jsonl").read_text().splitlines()[0])
turns = "; ".join(f"{t['label']} ({', '.join(c['category'] for c in t['claims'])})" for t in verdict["turns"])
print(f"{program:6} {words:>6} words: {turns} | {usage['calls']} calls, {usage['prompt_tokens']} prompt tokens, "
      f"{usage['prompt_tokens'] / max(1, usage['calls']):.0f} per call")
EOF
    done
done
