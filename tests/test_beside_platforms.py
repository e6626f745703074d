"""The wheel installs beside the platforms users already run: a fresh venv first gets each platform extra's library
(MLflow, Inspect AI, Langfuse) and pandas 2.2, at releases other than CI's lock (constraints/ci.txt) but inside
pyproject.toml's ranges; then ``pip install`` of the built wheel, told to keep what is installed (its dependencies
from the package index, as a user gets them), must succeed, change nothing, and leave every requirement met. (DeepEval and RAGAS, the conversational peers, are left out of
this venv for CI's time: each brings LangChain's stack, and .ci/run already resolves [deepeval] from the ranges in
a venv of its own.) It needs the
package index (the one network this project's CI reaches) and takes a few minutes: slow. (That the chosen releases
are inside the ranges and not the locks' is checked first, quickly.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version
from test_constraints import REPO, pinned, requirements
from test_wheel import build_wheel

# Already in the user's venv, each at a release the lock does not hold.
BEFORE = {"mlflow": "3.10.0", "inspect-ai": "0.3.270", "langfuse": "5.0.1", "pandas": "2.2.3"}
EXTRAS = ("mlflow", "inspect", "langfuse")


def installed(python: Path) -> dict[str, str]:
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    return {canonicalize_name(d["name"]): d["version"] for d in json.loads(listed)}


def test_the_chosen_releases_are_inside_the_ranges_and_not_the_locks():
    ranges = {canonicalize_name(r.name): r.specifier for r in requirements(*EXTRAS)}
    locked = pinned("ci.txt")
    for name, version in BEFORE.items():
        key = canonicalize_name(name)
        assert Version(version) != locked.get(key), f"{name} {version} is the lock's release"
        if key in ranges:
            assert Version(version) in ranges[key], f"{name} {version} is outside {ranges[key]}"
    [pandas] = [r for r in requirements() if r.name == "pandas"]
    assert BEFORE["pandas"] in pandas.specifier
    user_venv = pinned("beside-platforms.txt")
    assert {name: str(user_venv[canonicalize_name(name)]) for name in BEFORE} == BEFORE


@pytest.mark.slow
def test_pip_install_of_the_wheel_changes_none_of_the_platforms_libraries(tmp_path):
    wheel = build_wheel(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    user_venv = REPO / "constraints" / "beside-platforms.txt"  # the rest of that venv, resolved once
    subprocess.run([*pip, "-c", str(user_venv), *(f"{name}=={version}" for name, version in BEFORE.items())],
                   check=True, timeout=2400)
    before = installed(python)
    assert {n: before.get(canonicalize_name(n)) for n in BEFORE} == BEFORE
    # The user keeps what they have (their venv's versions as constraints): pip must then find vista-dspy's whole
    # stack inside the ranges beside them, or fail. A plain `pip install` would be free to upgrade what the
    # platforms share with it (measured: click 8.3.3 -> 8.5.1 and pyarrow 23.0.1 -> 26.0.1, for datasets 5.2), since
    # pip's resolver does not weigh the requirements of what is already installed.
    kept = tmp_path / "kept.txt"
    kept.write_text("".join(f"{name}=={version}\n" for name, version in before.items()))
    done = subprocess.run([*pip, "-c", str(kept), str(wheel)], capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    after = installed(python)
    assert after.get("vista-dspy") == wheel.name.split("-")[1]  # the wheel, installed
    assert {n: after.get(canonicalize_name(n)) for n in BEFORE} == BEFORE
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert changed == {}, "pip changed what the user had installed"
    check = subprocess.run([str(python), "-m", "pip", "check", "--disable-pip-version-check"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout  # every installed package's requirements still hold
