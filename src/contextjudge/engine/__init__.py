"""The engine: drives test cases through the stages. ``Run`` owns a run's judge context, cache, store and life;
``score_case`` scores one case in a run; ``evaluate`` (many cases), ``CaptureSession`` (captured cases) and
``assert_test`` (one case, in a test) are built on the two."""

from .run import Run
from .score import score_case

__all__ = ["Run", "score_case"]
