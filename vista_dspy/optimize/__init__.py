"""Everything that chooses a program for a model: ``compile`` (the compile and its gate, saving), the optimizers
(``rule_fitting``: the default ``rule``; ``choosing``: ``claims``; ``teleprompters``: ``labeled``, ``bootstrap``,
``random-search``, ``mipro``), their shared parts (``demos``: pools and budgets; ``dev_score``: scores on dev
dialogues; ``probing``: judging claims with label probabilities, cross-fitting folds; ``calibration``: wave 3's
calibration, kept for comparison), ``gate`` (the paired tests and the meta record) and ``study`` (optuna studies).
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "compile": ("DEFAULT_OPTIMIZER", "OPTIMIZERS", "CompileResult", "compile_program", "data_record",
                "save_compiled"),
    "demos": ("DEFAULT_DEMOS", "parse_demos"),
    "gate": ("Gate", "PairedTest", "ProgramMeta"),
    "study": ("run_study",),
})
