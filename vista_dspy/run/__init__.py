"""Running a judge: ``runner`` (resumable batch runs on a backend: threads, asyncio bounding requests in flight),
``distributed`` (the same on Ray), ``outdir`` (the output folder: append + fsync per verdict, a torn line cut, one
writer), and VISTA inside other code: ``judge_metric`` (``VistaMetric``, the metric of another DSPy program),
``reward`` (``VistaReward``, a trainer's reward function; ``pairs`` writes DPO preference pairs from its verdicts)
and ``testing`` (``assert_faithful`` for pytest, the CI gate's thresholds). The metric, the reward and the platforms'
scorers share ``dialogues`` (a response, the dialogue before it and its passages as one VISTA dialogue) and
``judge_setup`` (the program first, then the LM it needs, if any).
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "distributed": ("RayBackend",),
    "judge_metric": ("VistaMetric",),
    "outdir": ("OutputFolder", "read_verdicts"),
    "reward": ("VistaReward",),
    "runner": ("Concurrent", "RunResult", "Threads", "evaluate"),
    "testing": ("assert_faithful",),
})
