"""``deepeval.errors`` names, mapped to contextjudge's errors (which subclass the built-in DeepEval's tests expect)."""

from __future__ import annotations

from ...errors import ContextJudgeError, InvalidTestCaseError, JudgeUnavailableError, MissingTestCaseParamsError

__all__ = ["DeepEvalError", "MismatchedTestCaseInputsError", "MissingTestCaseParamsError", "MultimodalJudgeError"]

DeepEvalError = ContextJudgeError
MismatchedTestCaseInputsError = InvalidTestCaseError  # a ValueError, as a wrong case type is in DeepEval


class MultimodalJudgeError(JudgeUnavailableError, ValueError):
    """A case with images given to a judge that cannot take images: a ``ValueError`` as in DeepEval, raised before
    any judge call."""
