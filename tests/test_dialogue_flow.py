"""Issue 61: the training dialogues of a compile enter no module more than twice. A whole `vista compile --model M`
runs over HTTP against the fake OpenAI server, with a demo pool that its trials read, while a profiler (every
thread) watches which ``vista_dspy`` modules receive a call whose arguments hold two or more of the compile part's
dialogues, or of the pool's (the collection, not one dialogue judged at a time). An entry is such a call arriving from
another module of the package (the nearest calling frame of the package: a library in between, optuna calling the
objective or functools a cached property, is not a module the dialogues enter), counted once per calling function
and called function however often it repeats (every trial's judging is one entry)."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections import defaultdict

from helpers import vista_conversation
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.experiments.bench import load_dataset
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.schema import Dialogue

MOST_ENTRIES = 2
CONTAINERS = (list, tuple, set, frozenset)


def held(value, ids: frozenset[str], depth: int = 3, seen: set[int] | None = None) -> set[str]:
    """The ids of ``ids`` among the dialogues ``value`` holds: itself, or inside lists, tuples, sets, dict values,
    dataclass fields and the attributes of this package's objects, ``depth`` levels down."""
    if isinstance(value, Dialogue):
        return {value.id} & ids
    seen = set() if seen is None else seen
    if depth == 0 or id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None))):
        return set()
    seen.add(id(value))
    try:  # a container another thread changes meanwhile is read again at its next call
        if isinstance(value, dict):
            inner = list(value.values())
        elif isinstance(value, CONTAINERS):
            inner = list(value)
        elif dataclasses.is_dataclass(value) or type(value).__module__.startswith("vista_dspy"):
            inner = list(getattr(value, "__dict__", {}).values())
        else:
            return set()
    except RuntimeError:
        return set()
    found: set[str] = set()
    for item in inner:
        found |= held(item, ids, depth - 1, seen)
    return found


def qualname(code) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11


class Entries:
    """A profile function: per module, the (caller, callee) pairs by which a set of dialogues entered it."""

    def __init__(self, sets: dict[str, frozenset[str]]):
        self.sets = sets
        self.entries: dict[str, dict[str, set[str]]] = {name: defaultdict(set) for name in sets}

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        caller = frame.f_back
        if not module.startswith("vista_dspy") or caller is None or caller.f_globals.get("__name__") == module:
            return
        while caller is not None and not caller.f_globals.get("__name__", "").startswith("vista_dspy"):
            caller = caller.f_back
        source = caller.f_globals["__name__"] if caller is not None else "<outside the package>"
        if source == module:
            return
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        args = [frame.f_locals.get(name) for name in code.co_varnames[:count]]
        for name, ids in self.sets.items():
            if len(held(args, ids, depth=4)) >= 2:
                where = f"{source}.{qualname(caller.f_code)}" if caller is not None else source
                self.entries[name][module].add(f"{where} -> {qualname(code)}")

    def __enter__(self):
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)


def test_the_training_dialogues_of_a_compile_enter_no_module_more_than_twice(tmp_path, monkeypatch):
    files = {part: tmp_path / f"{part}.json" for part in ("compile", "pool", "test")}
    for part, (source, first, n) in {"compile": ("wow", 0, 3), "pool": ("wow", 50, 3), "test": ("cmu", 100, 2)}.items():
        files[part].write_text(json.dumps([vista_conversation(source, first + i) for i in range(n)]))
    ids = {part: frozenset(d.id for d in load_dataset("vista-human", files[part], None, 0)) for part in files}
    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "mine"))
    # Eleven trials: the seed, its six planned one-change designs (a model with no compiled program starts from the
    # seed as its shipped program too), then the seed's designs not measured yet, the fourth of which reads the pool.
    with FakeOpenAIServer() as server, Entries({"compile part": ids["compile"], "pool": ids["pool"]}) as traced:
        done = CliRunner().invoke(app, [
            "compile", "--model", "openai/fake", "--api-base", server.url, "--trials", "11", "--storage",
            f"sqlite:///{tmp_path / 's.db'}", "--no-cache", "--compile-data", f"vista-human={files['compile']}:all",
            "--test-data", f"vista-human={files['test']}:all", "--pool-data", f"vista-human={files['pool']}:all"])
    assert done.exit_code == 0, done.output
    assert "demo pool" in done.output  # a trial read the pool: its dialogues went where a pool's go
    for name, modules in traced.entries.items():
        assert modules, f"the {name}'s dialogues were seen entering no module: the trace missed them"
        crowded = {m: sorted(e) for m, e in modules.items() if len(e) > MOST_ENTRIES}
        assert not crowded, f"the {name}'s dialogues enter these modules more than {MOST_ENTRIES} times: {crowded}"
