"""VISTA as a scorer where users already evaluate, one module per platform, each importing its platform's library
only when it is used (its extra: ``pip install 'vista-dspy[mlflow]'``, ``[inspect]``, ``[langfuse]``,
``[deepeval]``, ``[ragas]``):

- ``mlflow.vista_scorer``: a scorer for ``mlflow.genai.evaluate`` returning ``Feedback``;
- ``inspect.vista_scorer``: an Inspect AI ``@scorer`` returning ``Score``;
- ``langfuse.vista_evaluator``: an evaluator for Langfuse's experiment runner returning ``Evaluation``;
- ``deepeval.VistaConversationalMetric``: a DeepEval conversational metric of a ``ConversationalTestCase``;
- ``ragas.VistaMultiTurn``: a RAGAS multi-turn metric of a ``MultiTurnSample``.

The first three are thin over one judging path, ``ResponseJudge`` (``_judging``): a ``VistaReward`` judging one
response at a time, sync or async; the two conversational metrics over ``_conversation``: a ``VistaMetric`` judging
every assistant turn of a conversation. The DeepEval and RAGAS modules import their library when imported (their
classes subclass its metric bases). Nothing is imported here.
"""
