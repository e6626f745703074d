"""VISTA as a scorer where users already evaluate, one module per platform, each importing its platform's library
only when it is used (its extra: ``pip install 'vista-dspy[mlflow]'``, ``[inspect]``, ``[langfuse]``):

- ``mlflow.vista_scorer``: a scorer for ``mlflow.genai.evaluate`` returning ``Feedback``;
- ``inspect.vista_scorer``: an Inspect AI ``@scorer`` returning ``Score``;
- ``langfuse.vista_evaluator``: an evaluator for Langfuse's experiment runner returning ``Evaluation``.

All three are thin over one judging path, ``ResponseJudge`` (``_judging``): a ``VistaReward`` judging one response
at a time, sync or async. Nothing is imported here.
"""
