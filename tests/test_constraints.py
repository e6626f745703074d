"""What a user installs is ranges, and what CI installs is inside them: no exact pin in [project.dependencies] or an
extra; each direct requirement's lower bound (dependencies and [test]) is the version constraints/lowest.txt holds,
so the lowest-versions venv of .ci/run tests the bounds as written; and every version of the locks
(constraints/ci.txt, constraints/deepeval.txt) is one the ranges allow."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads pyproject.toml")

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirements(*extras: str, base: bool = True) -> list[Requirement]:
    lines = list(PROJECT["dependencies"]) if base else []
    for extra in extras:
        lines += PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def pinned(name: str) -> dict[str, Version]:
    """A constraints file's ``name==version`` lines, by canonical name (it names the file on a bad line)."""
    found = {}
    for number, line in enumerate((REPO / "constraints" / name).read_text().splitlines(), start=1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        package, sep, version = line.partition("==")
        if not sep:
            raise AssertionError(f"constraints/{name}, line {number}: {line!r} is not NAME==VERSION")
        found[canonicalize_name(package)] = Version(version.split(";")[0].strip())
    return found


def test_nothing_a_user_installs_is_pinned_exactly():
    extras = list(PROJECT["optional-dependencies"])
    exact = [str(r) for r in requirements(*extras) if any(s.operator in ("==", "===") for s in r.specifier)]
    assert exact == []
    assert {"deepeval", "ragas", "mlflow", "inspect", "langfuse"} <= set(extras)


def test_each_lower_bound_is_the_version_the_lowest_venv_installs():
    lowest = pinned("lowest.txt")
    wrong = {}
    for requirement in requirements("test"):
        bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert bounds, f"{requirement} has no lower bound"
        got = lowest.get(canonicalize_name(requirement.name))
        if got != max(bounds):
            wrong[requirement.name] = (str(max(bounds)), str(got))
    assert wrong == {}, "pyproject's lower bound vs constraints/lowest.txt (regenerate it, or move the bound)"


@pytest.mark.parametrize("lock, extras", [("ci.txt", ("test", "local", "ray", "mlflow", "inspect", "langfuse",
                                                     "ragas")), ("deepeval.txt", ("test", "deepeval"))])
def test_every_locked_version_is_inside_the_ranges(lock, extras):
    locked = pinned(lock)
    outside = {r.name: str(locked.get(canonicalize_name(r.name))) for r in requirements(*extras)
               if locked.get(canonicalize_name(r.name)) not in r.specifier}
    assert outside == {}
