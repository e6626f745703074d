"""benchmarks/heldout.sh end to end on a synthetic full file: fetched with `vista data get --from DIR`, its held-out
half cut by the rule, judged by the shipped program and by the seed on a fake OpenAI-compatible server, and the
paired table printed. The real file's hashes are swapped for the synthetic file's by a `vista` wrapper on PATH (the
only change to what a user runs); nothing of the real held-out half is needed or written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import vista_conversation

from vista_dspy.data.sources import HELDOUT_HALF, VISTA_FULL
from vista_dspy.lm.fake import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "heldout.sh"

# A `vista` that pins the synthetic file's hashes in place of the authors' file's, then runs the real CLI.
WRAPPER = """#!{python}
import dataclasses, json, os, sys
from vista_dspy.data import sources
pins = json.loads(os.environ["SYNTHETIC_PINS"])
full = dataclasses.replace(sources.VISTA_FULL, sha256=pins["full"], size=pins["size"])
for name, ds in list(sources.DATASETS.items()):
    if ds.files == (sources.VISTA_FULL,):
        built = tuple(dataclasses.replace(f, sha256=pins.get(f.path, f.sha256), size=None) for f in ds.built)
        sources.DATASETS[name] = dataclasses.replace(ds, files=(full,), built=built)
from vista_dspy.cli import main
sys.exit(main())
"""


def test_heldout_script_judges_the_heldout_half_with_both_programs_and_prints_the_paired_table(tmp_path):
    # Two sources with odd counts: A 1,3,4,7,8 -> held out 3, 7; B 2,5,9 -> held out 5.
    full = [vista_conversation("A", i, tricky=i == 7) for i in (7, 1, 4, 8, 3)]
    full += [vista_conversation("B", i) for i in (9, 2, 5)]
    mirror = tmp_path / "mirror"
    (mirror / VISTA_FULL.path).parent.mkdir(parents=True)
    raw = json.dumps(full).encode()
    (mirror / VISTA_FULL.path).write_bytes(raw)
    heldout = [vista_conversation("A", 3), vista_conversation("A", 7, tricky=True), vista_conversation("B", 5)]
    pins = {"full": hashlib.sha256(raw).hexdigest(), "size": len(raw),
            HELDOUT_HALF.path: hashlib.sha256(json.dumps(heldout, indent=2).encode()).hexdigest()}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vista").write_text(WRAPPER.format(python=sys.executable))
    (bin_dir / "vista").chmod(0o755)
    work, out = tmp_path / "empty-cwd", tmp_path / "out"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VISTA_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", HOME=str(tmp_path / "home"), OUT=str(out),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),  # this checkout's code
               SYNTHETIC_PINS=json.dumps(pins), VISTA_CACHE_DIR=str(tmp_path / "cache"), VISTA_DATA_FROM=str(mirror))
    with FakeOpenAIServer() as server:
        done = subprocess.run(["bash", str(SCRIPT), "openai/fake", "--api-base", server.url, "--program", "local",
                               "--no-cache"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # The held-out half was built on this machine from the fetched file, and only it was judged, by both programs.
    assert (tmp_path / "cache" / "data" / HELDOUT_HALF.path).read_bytes() == json.dumps(heldout, indent=2).encode()
    for system in ("vista", "seed"):
        verdicts = (out / "runs" / "vista-human:heldout-half" / system / "verdicts.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["dialogue_id"] for line in verdicts) == ["A-3", "A-7", "B-5"]
    text = done.stdout
    assert "## Paired against the seed program: vista-human:heldout-half" in text
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    # The seed by hand: right on A-3 and B-5 (2 claims each), wrong on the tricky A-7 turn and its one claim.
    assert rows["seed"].startswith("| seed | 0.667 | 0 / 1 | 1.00 / 0.67 / 0.80 | 0.800 |")
    assert rows["seed"].endswith("| +0.000 (+0.000 to +0.000), +0 / −0, p = 1.000 | +0 / −0, p = 1.0000 |")
    assert "vista (local)" in rows and rows["vista (local)"].count(" | ") == rows["seed"].count(" | ")
