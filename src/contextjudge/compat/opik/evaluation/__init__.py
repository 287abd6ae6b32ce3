"""``opik.evaluation``: the ``metrics`` submodule (``opik.evaluation.metrics``)."""

from . import metrics

__all__ = ["metrics"]
