"""Failed calls and outages against the fake OpenAI server (``vista_dspy.lm.fake``), before and after one resume.

Scenarios on the annotated dev file, each run into its own output directory:
- fault mixes: 20 % of requests fail (HTTP 500, 429, a timeout, a malformed answer: 5 % each; or malformed answers
  only), the client retries HTTP errors and timeouts (3 times), the judge asks an unparseable answer again; then the
  same command is run once more over the same faulty server (a resume, which re-asks the verdicts holding a
  failure).
- outage: the server goes down after a third of the run's requests and comes back on the same address; the first
  run stops, the second resumes.
Each is run with the policy before issue 15 (one parse retry, a resume re-asks nothing, an outage never stops the
run) and with the defaults now. Prints dialogues, claims, ERROR claims and unknown turns after each step.

    python benchmarks/outages.py [--dialogues 30] [--threads 8]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from vista_dspy import Category
from vista_dspy.data import data_dir, load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts
from vista_dspy.stages import CallFailures, EndpointDown

ROOT = Path(__file__).resolve().parents[1]

FAULT_MIXES = {
    "20 %: 500, 429, timeout, malformed 5 % each": {"500": 0.05, "429": 0.05, "timeout": 0.05, "malformed": 0.05},
    "20 %: malformed answers": {"malformed": 0.20},
}
POLICIES = {
    "before (1 parse retry, no repair, no stop)": dict(failures=(1, None), retry_errors=False),
    "now (defaults)": dict(failures=(2, 3), retry_errors=True),
}


def counts(out: Path) -> dict[str, int]:
    verdicts = read_verdicts(out / VERDICTS)
    turns = [t for v in verdicts for t in v.turns]
    return {"dialogues": len(verdicts), "lines": len((out / VERDICTS).read_text().splitlines()),
            "claims": sum(len(t.claims) for t in turns),
            "ERROR claims": sum(c.category is Category.ERROR for t in turns for c in t.claims),
            "unknown turns": sum(t.label == "unknown" for t in turns)}


def run(dialogues, out: Path, server: FakeOpenAIServer, policy: dict, threads: int, timeout: float | None) -> str:
    parse_retries, stop_after = policy["failures"]
    config = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=3, timeout=timeout, cache=False)
    try:
        evaluate(dialogues, Vista.from_program(None), Threads(config.build(), threads=threads), out_dir=out,
                 retry_errors=policy["retry_errors"], failures=CallFailures(parse_retries, stop_after))
    except EndpointDown:
        return "stopped (exit 1)"
    return "finished"


def fault_mixes(dialogues, work: Path, threads: int) -> list[tuple]:
    rows = []
    for mix, faults in FAULT_MIXES.items():
        for name, policy in POLICIES.items():
            out = work / f"mix-{len(rows)}"
            with FakeOpenAIServer(faults=faults, hang=2.0, seed=7) as server:
                for step in ("first run", "resumed once"):
                    status = run(dialogues, out, server, policy, threads, timeout=0.5)
                    rows.append((mix, name, step, status, counts(out)))
    return rows


def outage(dialogues, work: Path, threads: int) -> list[tuple]:
    with FakeOpenAIServer() as server:  # how many requests a whole run makes
        run(dialogues, work / "sizing", server, POLICIES["now (defaults)"], threads, timeout=None)
        requests = server.requests
    rows = []
    for name, policy in POLICIES.items():
        out = work / f"outage-{len(rows)}"
        with FakeOpenAIServer(down_after=requests // 3) as server:
            status = run(dialogues, out, server, policy, threads, timeout=None)
            port = server.port
        rows.append((f"down after {requests // 3} of {requests} requests", name, "first run", status, counts(out)))
        with FakeOpenAIServer(port=port) as server:
            status = run(dialogues, out, server, policy, threads, timeout=None)
        rows.append(("", name, "rerun, server back", status, counts(out)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialogues", type=int, default=30)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--data", type=Path, default=data_dir(ROOT) / "vista_human_eval" / "dev.json")
    options = parser.parse_args()
    dialogues = load_dialogues(options.data)[: options.dialogues]
    with tempfile.TemporaryDirectory() as work:
        rows = fault_mixes(dialogues, Path(work), options.threads) + outage(dialogues, Path(work), options.threads)
    header = ["scenario", "policy", "step", "run", "dialogues", "lines", "claims", "ERROR claims", "unknown turns"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for scenario, policy, step, status, numbers in rows:
        print("| " + " | ".join([scenario, policy, step, status, *(str(numbers[k]) for k in header[4:])]) + " |")


if __name__ == "__main__":
    main()
