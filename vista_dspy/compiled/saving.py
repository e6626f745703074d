"""A judge as a saved program: built from a program file, written to one, named by its content.

``SavedProgram`` is the part of ``Vista`` that meets this folder, kept apart from the method as DSPy keeps ``save``
and ``load`` in ``BaseModule``, apart from ``Module``. A program file's demos and instructions go into the judge's
predictors, its options and decision rule into the judge; ``program_file`` takes them back out the same way. Of the
judge it needs what every ``dspy.Module`` has (``dump_state``, ``load_state``), a constructor taking
``(options, rule=...)``, and the attributes that constructor sets: ``options``, ``rule`` and ``program_name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..decision import DecisionRule
from ..options import JudgeOptions
from .files import EVIDENCE_PROGRAM, ProgramFile, content_hash, read_program, write_program

if TYPE_CHECKING:
    from typing_extensions import Self


class SavedProgram:
    """The loading, saving and identity of a judge's program (see the module's docstring)."""

    options: JudgeOptions
    rule: DecisionRule | None
    program_name: str

    @classmethod
    def from_program(cls, program: str | Path | ProgramFile | None = None, **changes: Any) -> Self:
        """A judge with a saved program loaded: a path to a JSON file, a name in ``vista_dspy/compiled/``, a
        ``ProgramFile``, or None for the shipped seed program. The program's saved options apply; ``changes``
        (option names) win over them."""
        file = program if isinstance(program, ProgramFile) else read_program(program)
        options = JudgeOptions().replace(**file.options)
        rule = DecisionRule.model_validate(file.rule) if file.rule else None
        module = cls(options.replace(**changes), rule=rule)
        module.load_state(file.state)
        module.program_name = file.name
        return module

    @classmethod
    def evidence_from_program(cls, program: str | Path | ProgramFile | None = None, **changes: Any) -> Self:
        """The evidence system (``vista evaluate --system evidence``): ``program``'s claims decided by the evidence
        cues alone (its rule's evidence model, or the shipped evidence rule when it has none), so Decompose is the
        only LM call."""
        judge = cls.from_program(program, **changes)
        rule = judge.rule or cls.from_program(EVIDENCE_PROGRAM).rule
        judge.rule = rule.evidence_only()
        judge.program_name = f"{judge.program_name}+evidence-only"
        return judge

    def program_file(self, name: str | None = None) -> ProgramFile:
        """What a program file holds for this judge: demos and instructions, saved options, decision rule."""
        from dspy.utils.saving import get_dependency_versions

        state = self.dump_state()
        state["metadata"] = {"dependency_versions": get_dependency_versions()}
        return ProgramFile(name or self.program_name, state, self.options.saved(),
                           self.rule.model_dump(mode="json") if self.rule else None)

    def save_program(self, path: str | Path) -> Path:
        """Write this judge's program file (see ``files``)."""
        path = Path(path)
        return write_program(self.program_file(path.stem), path)

    def content_hash(self) -> str:
        """What identifies the program this judge runs: its demos, instructions, options and decision rule."""
        return content_hash(self.dump_state(), self.options.saved(),
                            self.rule.model_dump(mode="json") if self.rule else None)
