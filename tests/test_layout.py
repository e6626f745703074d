"""The package's layout rules, read from the import statements: data flows one way, the method knows no plumbing,
and no modules import each other in a circle (an import inside a function counts, and so does a name a package's
face loads on first use)."""

import ast
import asyncio
import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import assistant, dialogue, user

from vista_dspy.lm.fake import RuleEngine, rule_lm

PACKAGE = Path(__file__).resolve().parents[1] / "vista_dspy"


def module_name(package: Path, path: Path) -> str:
    """``program``, ``run.runner``, ``lm.clients`` (a folder's ``__init__``), ``""`` (the package's own)."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` -> the package modules it imports, as dotted names under the package: every
    ``import`` and ``from`` statement anywhere in the file (inside functions and ``TYPE_CHECKING`` too), and the
    modules a face's ``exports(__name__, {...})`` table loads on first use."""
    files = {module_name(package, path): path for path in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        own = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        own = [part for part in own if part]
        found = set()

        def add(target: list[str], names: list[str] = ()) -> None:
            dotted = ".".join(target)
            subs = [".".join([*target, n]) for n in names if ".".join([*target, n]) in files]
            found.update(subs)  # noqa: B023 (add is called within this iteration)
            if len(subs) < len(names) or not names:
                found.add(dotted)  # noqa: B023

        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = own[: len(own) - node.level + 1]
                add(base + (node.module.split(".") if node.module else []), [a.name for a in node.names])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package.name:
                add(node.module.split(".")[1:], [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                found.update(".".join(a.name.split(".")[1:]) for a in node.names
                             if a.name.split(".")[0] == package.name)
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "exports" and len(node.args) == 2
                  and isinstance(node.args[1], ast.Dict)):
                found.update(".".join([*own, key.value]) for key in node.args[1].keys)
        graph[name] = {target for target in found if target in files and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a longer loop (strongly connected
    components of more than one module, Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# What a part of the package may not import. The method is the package root's modules (the face and its lazy
# helper aside); a folder's rule covers its modules and its sub-folders.
FOLDERS = ("data", "compiled", "lm", "optimize", "run", "experiments", "cli", "integrations")
FORBIDDEN = {
    "method": {"optimize", "run", "experiments", "lm", "cli", "data", "integrations"},
    "data": {"method", "compiled", "lm", "optimize", "run", "experiments", "cli", "integrations"},  # records only
    "compiled": {"lm", "optimize", "run", "experiments", "cli", "integrations"},
    "lm": {"method", "optimize", "run", "experiments", "cli", "integrations"},
    "optimize": {"experiments", "cli", "integrations"},
    "run": {"optimize", "experiments", "cli", "integrations"},
    "experiments": {"cli", "integrations"},
    # The platforms' scorers sit on top, over the reward: nothing of the package imports them.
    "integrations": {"optimize", "experiments", "cli"},
}
# Method modules another part may import although its rule forbids the method: the records.
RECORDS = {"schema"}
# Imports the rules forbid that stay, each with its reason.
ALLOWED = {
    # The public shortcut from a model string to the program shipped for it (compiled/<M>.json, else the seed).
    ("program", "lm.models"),
}
FACES = {"", "lazy"}


def part_of(module: str) -> str:
    top = module.split(".")[0]
    return top if top in FOLDERS else "face" if module in FACES else "method"


def layer_violations(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, imported module) for every import that crosses a forbidden line."""
    found = []
    for module, targets in sorted(graph.items()):
        forbidden = FORBIDDEN.get(part_of(module), set())
        for target in sorted(targets):
            if part_of(target) in forbidden and target not in RECORDS and (module, target) not in ALLOWED:
                found.append((module, target))
    return found


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the layout's rooms: a folder (``FOLDERS``) is one room, a module at the package root is one.
    A folder that imports a root module which imports the folder back is a circle here although its modules are
    not: the layout's floors are these rooms."""
    def room(module: str) -> str:
        top = module.split(".")[0]
        return top if top in FOLDERS else module

    collapsed: dict[str, set[str]] = {}
    for module, targets in graph.items():
        collapsed.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
    return collapsed


GRAPH = import_graph(PACKAGE)
# The issue-47 bounds: the method's root holds at most this many modules (its face excluded), and no module of the
# package is longer than this many lines (a longer one holds more than one concern).
ROOT_MODULES = 16
MODULE_LINES = 450


def test_the_graph_reads_every_kind_of_import():
    # a module-level relative import, one inside a function, one from a folder's face, a face's lazy table
    assert "run.runner" in GRAPH["experiments.tables"]
    assert "optimize.study" in GRAPH["optimize.compile"]  # imported inside judge_test_part
    assert "lm.models" in GRAPH["program"]  # imported inside Vista.for_model
    assert "run.judge_metric" in GRAPH[""] and "lm.clients.cache" in GRAPH["lm.clients"]


def test_optimize_holds_at_most_15_modules_by_concern_and_one_gate():
    """Issue 61: the study, the rules, one gate; its faces aside."""
    modules = [p for p in (PACKAGE / "optimize").rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 15, sorted(str(p.relative_to(PACKAGE)) for p in modules)
    assert [p.name for p in modules if "gate" in p.stem and p.parent.name == "optimize"] == ["gate.py"]


def test_no_import_circles():
    assert circles(GRAPH) == []


def test_the_folders_import_only_downward():
    assert layer_violations(GRAPH) == []


def test_no_room_imports_one_that_imports_it_back():
    """No folder imports a root module that imports the folder back (no import up a floor)."""
    assert circles(rooms(GRAPH)) == []


def test_the_root_holds_at_most_16_modules_and_no_module_is_over_450_lines():
    root = sorted(path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(root) <= ROOT_MODULES, root
    lengths = {str(path.relative_to(PACKAGE)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MODULE_LINES} == {}


def test_records_know_no_modules():
    assert GRAPH["schema"] == set()


@pytest.mark.parametrize("module,forbidden", [
    # scoring and the statistics that compare judges never call the method
    ("scoring", {"program", "stages", "batching"}),
    ("optimize.metrics", {"program", "stages", "batching"}),
    # the stage drivers and the prompts know nothing of the program that yields the calls
    ("stages", {"program", "batching"}),
    ("batching", {"program"}),
    ("prompts", {"stages", "program"}),
    # the baselines are judges of their own, not built on Vista
    ("baselines", {"program", "compiled.files"}),
])
def test_within_the_method_data_flows_one_way(module, forbidden):
    assert GRAPH[module], f"no package imports found in {module}: the test reads the wrong file"
    assert GRAPH[module] & forbidden == set()


def _plant(package, sources):
    """A small copy of the layout: ``sources`` maps a file under ``package`` to its text."""
    for name, text in sources.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_layer_check_reports_a_planted_forbidden_import(tmp_path):
    """The checker run on a small copy of the layout with two forbidden imports planted: the method importing the
    runner (inside a function) and the LM side importing a method module that is not a record."""
    package = tmp_path / "vista_dspy"
    sources = {
        "__init__.py": "",
        "schema.py": "",
        "stages.py": "from .schema import Dialogue\n",
        "program.py": "from . import stages\n\ndef judge():\n    from .run.runner import evaluate\n",
        "run/__init__.py": "",
        "run/runner.py": "from ..program import Vista\n",
        "lm/__init__.py": "",
        "lm/models.py": "from ..schema import Dialogue\nfrom ..stages import StageCall\n",
    }
    graph = import_graph(_plant(package, sources))
    assert layer_violations(graph) == [("lm.models", "stages"), ("program", "run.runner")]
    assert circles(graph) == [["program", "run.runner"]]


def test_the_room_check_reports_a_folder_importing_a_module_that_imports_it_back(tmp_path):
    """A build script among the program files (compiled/build.py importing the method, which reads compiled/files):
    no circle between modules, one between rooms."""
    package = tmp_path / "vista_dspy"
    sources = {
        "__init__.py": "",
        "program.py": "from .compiled.files import read_program\n",
        "compiled/__init__.py": "",
        "compiled/files.py": "",
        "compiled/build.py": "from ..program import Vista\n",
    }
    graph = import_graph(_plant(package, sources))
    assert circles(graph) == []
    assert circles(rooms(graph)) == [["compiled", "program"]]


def test_the_records_scoring_and_metrics_import_without_dspy_or_litellm():
    script = textwrap.dedent("""
        import sys
        import vista_dspy.schema, vista_dspy.scoring, vista_dspy.optimize.metrics
        from vista_dspy import Dialogue, Category
        print(sorted(m for m in ("dspy", "litellm") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_public_api_is_the_same_plus_the_reward():
    import vista_dspy

    assert vista_dspy.__all__ == ["Category", "ClaimVerdict", "DecisionRule", "Dialogue", "DialogueVerdict",
                                  "GoldClaim", "Grounding", "JudgeOptions", "Turn", "TurnGold", "TurnVerdict",
                                  "Vista", "VistaMetric", "VistaReward"]
    from vista_dspy import DecisionRule, JudgeOptions, Vista, VistaMetric, VistaReward  # noqa: F401
    from vista_dspy.decision import DecisionRule as defined

    assert DecisionRule is defined
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        vista_dspy.Nothing  # noqa: B018


def test_the_async_driver_holds_the_guard_it_is_given_around_every_predictor_call():
    from vista_dspy import Vista
    from vista_dspy.stages import CALL_GUARD

    dlg = dialogue(user("Tell me about Paris."), assistant("Paris is in France. It has the Eiffel Tower.",
                                                          document="Paris is the capital of France."))
    engine = RuleEngine()
    held = []

    @contextlib.asynccontextmanager
    async def guard(lm):
        held.append(lm)
        yield

    async def judge():
        import dspy

        CALL_GUARD.set(guard)
        with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
            return await Vista.from_program().acall(dlg)

    verdict = asyncio.run(judge())
    # one predictor call, one request (the JSON adapter parses the fake's answers the first time)
    assert verdict.turns[0].claims and len(held) == len(engine.requests) > 0
    assert all(lm is not None for lm in held)
