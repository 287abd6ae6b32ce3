"""``deepeval.dataset`` names: ``Golden`` (contextjudge's own goldens, which take DeepEval's main fields)."""

from ...cases.goldens import Golden

__all__ = ["Golden"]
