"""Experiments over the method: ``bench`` (a benchmark plan: datasets x systems x ablations, and its runs),
``tables`` (the tables of a benchmark folder), ``report`` (terminal views and the HTML report, from ``templates/``).
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "bench": ("Plan", "run_benchmark"),
    "report": ("build_report", "write_report"),
    "tables": ("compute_tables", "write_tables"),
})
