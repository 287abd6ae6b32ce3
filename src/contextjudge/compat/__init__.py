"""Import-compatible entry points for users coming from DeepEval, Ragas and Opik.

Change the import line (and the ``model``/``llm`` argument) of their documented examples and they run on
contextjudge: ``contextjudge.compat.deepeval``, ``contextjudge.compat.ragas``, ``contextjudge.compat.opik``.
"""

__all__: list[str] = []  # a namespace: the entry points are its submodules
