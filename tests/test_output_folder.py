"""Faults of the output folder and the program file: two commands on one folder, a damaged verdict line, a full
disk, SIGTERM mid-run, a hand-edited program, a document longer than the model's context."""

import json
import os
import resource
import signal
import subprocess
import sys
import time
import warnings

import pytest
from helpers import assistant, dialogue, user

from vista_dspy.compiled.files import StaleMeta, read_program
from vista_dspy.data import InputError, load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer, rule_lm
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.outdir import DAMAGED, LOCK, FolderBusy, OutputFolder
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts


def command(dev_file, server, out, *extra, limit=6):
    return [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(dev_file), "--model", "openai/fake", "--api-base",
            server.url, "--limit", str(limit), "--threads", "1", "--out", str(out), "--no-cache", *extra]


def complete_lines(path):
    return [line for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")] \
        if path.exists() else []


def wait_for(predicate, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline and not predicate():
        time.sleep(0.05)
    assert predicate()


def test_a_second_command_on_a_held_folder_is_refused_and_nothing_is_judged_twice(tmp_path, dev_file):
    out = tmp_path / "out"
    with FakeOpenAIServer(latency=0.3) as server:  # the first command runs for a while
        first = subprocess.Popen(command(dev_file, server, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
        wait_for(lambda: len(complete_lines(out / VERDICTS)) >= 1)
        second = subprocess.run(command(dev_file, server, out), capture_output=True, text=True, timeout=120)
        _, first_errors = first.communicate(timeout=300)
    assert first.returncode == 0, first_errors
    assert second.returncode == 2
    message = " ".join(second.stderr.split())
    assert f"{out} is in use by another run (process {first.pid}" in message and "Traceback" not in message
    ids = [json.loads(line)["dialogue_id"] for line in complete_lines(out / VERDICTS)]
    assert len(ids) == len(set(ids)) == 6


def test_the_python_api_is_refused_a_folder_another_run_holds(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:1]
    with OutputFolder(tmp_path):
        with pytest.raises(FolderBusy, match=f"process {os.getpid()}"):
            evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path)
    assert evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path).verdicts  # released
    assert (tmp_path / LOCK).read_text() == f"{os.getpid()}\n"


def test_a_damaged_middle_line_is_set_aside_and_its_dialogue_judged_again(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:5]
    out = tmp_path / "out"
    evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=out)
    lines = complete_lines(out / VERDICTS)
    damaged_id = json.loads(lines[2])["dialogue_id"]
    garbage = lines[2][:40] + b"#### a disk error or an editor ####\n"
    (out / VERDICTS).write_bytes(b"".join(lines[:2] + [garbage] + lines[3:]))
    result = evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=out)
    assert result.set_aside == 1 and result.resumed == 4
    assert (out / DAMAGED).read_bytes() == garbage
    after = complete_lines(out / VERDICTS)
    assert after[:4] == lines[:2] + lines[3:]  # every readable line kept byte for byte
    assert [json.loads(line)["dialogue_id"] for line in after[4:]] == [damaged_id]


def test_the_cli_says_where_damaged_lines_were_set_aside(tmp_path, dev_file):
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        assert subprocess.run(command(dev_file, server, out, limit=3), capture_output=True).returncode == 0
        lines = complete_lines(out / VERDICTS)
        (out / VERDICTS).write_bytes(lines[0] + b"{}\n" + b"".join(lines[1:]))
        done = subprocess.run(command(dev_file, server, out, limit=3), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    message = " ".join(done.stderr.split())
    assert f"set aside: 1 damaged lines of {out / VERDICTS}" in message and str(out / DAMAGED) in message
    assert len(complete_lines(out / VERDICTS)) == 3


def test_a_full_disk_stops_with_exit_1_and_the_rerun_completes(tmp_path, dev_file):
    reference = evaluate(load_dialogues(dev_file)[:6], Vista.from_program(), rule_lm()).verdicts
    limit = int(2.5 * max(len(v.model_dump_json()) + 1 for v in reference))  # room for two or three verdicts
    out = tmp_path / "out"

    def small_files():  # in the child: a file may not grow past `limit` bytes (EFBIG, as a full disk's ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with FakeOpenAIServer() as server:
        full = subprocess.run(command(dev_file, server, out), capture_output=True, text=True, timeout=300,
                              preexec_fn=small_files)
        kept = complete_lines(out / VERDICTS)
        assert full.returncode == 1, full.stderr
        message = " ".join(full.stderr.split())
        assert f"cannot write in {out}: File too large" in message and "rerun the same command" in message
        assert "Traceback" not in full.stderr
        assert 1 <= len(kept) < 6 and (out / VERDICTS).read_bytes() == b"".join(kept)  # no torn line left
        done = subprocess.run(command(dev_file, server, out), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = complete_lines(out / VERDICTS)
    assert after[: len(kept)] == kept and len({json.loads(line)["dialogue_id"] for line in after}) == len(after) == 6


def test_sigterm_stops_like_ctrl_c_and_the_file_stays_whole(tmp_path, dev_file):
    out = tmp_path / "out"
    with FakeOpenAIServer(latency=0.05) as server:
        process = subprocess.Popen(command(dev_file, server, out, limit=12), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        wait_for(lambda: len(complete_lines(out / VERDICTS)) >= 2)
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=120)
        assert process.returncode == 130, errors
        assert "interrupted" in errors and "Traceback" not in errors
        kept = complete_lines(out / VERDICTS)
        assert (out / VERDICTS).read_bytes() == b"".join(kept) and len(read_verdicts(out / VERDICTS)) == len(kept)
        assert subprocess.run(command(dev_file, server, out, limit=12), capture_output=True).returncode == 0
    ids = [json.loads(line)["dialogue_id"] for line in complete_lines(out / VERDICTS)]
    assert len(ids) == len(set(ids)) == 12


def seed_copy(tmp_path, **vista_section):
    program = read_program(None).to_json()
    program["vista"].update(vista_section)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(program))
    return path


def test_a_hand_edited_program_is_refused_naming_the_file_and_the_field(tmp_path, dev_file):
    path = seed_copy(tmp_path, options={"claim_calls": "each"})
    done = subprocess.run([sys.executable, "-m", "vista_dspy.cli", "evaluate", str(dev_file), "--model",
                           "openai/fake", "--api-base", "http://127.0.0.1:9/v1", "--program", str(path), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert (f"{path}: field 'vista.options.claim_calls': 'each' is not allowed: Input should be 'per-claim', "
            "'batched' or 'joint'") in message
    assert "pydantic" not in message and "Traceback" not in message
    evidence = {"features": ["uncovered_reference"], "coef": [[1.0], [0.0], [0.0], [0.0]],
                "intercept": [0.0, 0.0, 0.0, 0.0], "threshold": 2}
    with pytest.raises(InputError, match=r"field 'vista.rule.evidence.threshold': 2 is not allowed"):
        read_program(seed_copy(tmp_path, rule={"evidence": evidence}))
    with pytest.raises(InputError, match=r"field 'vista.calibration': program format 1 with a calibration"):
        read_program(seed_copy(tmp_path, format=1, calibration={"verify_threshold": 0.3}))


def test_a_program_edited_after_its_gate_is_read_with_a_warning(tmp_path):
    path = tmp_path / "tuned.json"
    program = Vista.from_program()
    program.save_program(path)
    meta = {"program": "tuned", "program_sha256": program.content_hash()}
    (tmp_path / "tuned.meta.json").write_text(json.dumps(meta))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_program(path).content_hash == program.content_hash()  # as compiled: no warning
    edited = json.loads(path.read_text())
    edited["vista"]["options"]["claim_calls"] = "batched"
    path.write_text(json.dumps(edited))
    with pytest.warns(StaleMeta, match=r"tuned.json was changed after it was compiled.*gate result"):
        read_program(path)


@pytest.mark.parametrize("model", ["openai/fake", "hosted_vllm/fake"], ids=["litellm", "native"])
@pytest.mark.parametrize("document, reading", [
    ("It opened in 1901. " * 3000, "full"),  # every word read (the paper's reading): 14,000 tokens
    ("It opened in 1901 and " * 3000, "turn"),  # one sentence of 16,000 tokens: the passage that decides is all of it
], ids=["full-reading", "one-long-sentence"])
def test_a_document_longer_than_the_context_fails_its_turn_alone(model, document, reading):
    long = dialogue(user("When did it open?"), assistant("The museum opened in 1901.", document),
                    user("Is it big?"), assistant("The museum is big.", "The museum is big."), id="long")
    with FakeOpenAIServer(context_tokens=4000) as server:
        config = ModelConfig(model=model, api_base=server.url, num_retries=0, cache=False)
        result = evaluate([long], Vista.from_program(evidence=reading), Threads(config.build()))
    too_long, short = result.verdicts[0].turns
    assert too_long.label == "unknown" and short.label == "faithful"
    assert [c.error.split(":")[0] for c in too_long.claims] == ["the prompt does not fit the model's context "
                                                                "(nothing was cut)"]


def test_a_damaged_run_json_is_named(tmp_path, dev_file):
    from vista_dspy.run.runner import RunConflict

    (tmp_path / "run.json").write_text('{"program": "se')
    with pytest.raises(RunConflict, match=r"run.json: not a run's settings .*--overwrite"):
        evaluate(load_dialogues(dev_file)[:1], Vista.from_program(), rule_lm(), out_dir=tmp_path)
