"""The package's layout rules, read from the import statements: data flows one way, the method knows no plumbing."""

import ast
import asyncio
import contextlib
from pathlib import Path

import pytest

from fakes import RuleEngine, rule_lm
from helpers import assistant, dialogue, user

PACKAGE = Path(__file__).resolve().parents[1] / "vista_dspy"


def package_imports(module: str) -> set[str]:
    """The vista_dspy modules a module (``program`` or ``data/vista``) imports, as dotted names under the package."""
    path = PACKAGE / f"{module}.py"
    if not path.exists():
        path = PACKAGE / module / "__init__.py"
    depth = module.count("/") + (path.name == "__init__.py")
    parent = module.split("/")[:depth]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = parent[: len(parent) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            names = [target] if node.module else [".".join(base + [a.name]) for a in node.names]
            found.update(n for n in names if n)
    return found


def test_records_know_no_modules():
    assert package_imports("schema") == set()


@pytest.mark.parametrize("module,forbidden", [
    # scoring and metrics never call the method
    ("scoring", {"program", "stages", "batching", "runner", "clients", "cli"}),
    # the method knows neither the CLI, nor the runner, nor how requests are throttled or sent
    ("program", {"runner", "cli", "clients", "models", "local", "distributed"}),
    ("stages", {"runner", "cli", "clients", "models", "local", "distributed", "program"}),
    ("batching", {"runner", "cli", "clients", "models", "local", "distributed", "program"}),
    ("prompts", {"runner", "cli", "clients", "models", "stages", "program"}),
    # loaders produce records only
    ("data/vista", {"program", "stages", "runner", "cli", "clients", "models"}),
    ("data/begin", {"program", "stages", "runner", "cli", "clients", "models"}),
])
def test_modules_import_only_downstream(module, forbidden):
    imported = package_imports(module)
    assert imported, f"no package imports found in {module}: the test reads the wrong file"
    clash = {name for name in imported if name.split(".")[0] in forbidden}
    assert not clash, f"{module} imports {sorted(clash)}"


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
