"""The embedded offline judge (``model="local"``): a small cross-encoder of our own, trained on open data.

It is not an LLM. It answers contextjudge's structured judge requests deterministically, with no network and no key,
reading the question (or statement) and each text together with a model that ships inside the package and runs on
numpy (``training/`` rebuilds it; docs/judges.md has its figures).
"""

from ._judge import MODEL_NAME, LocalJudge

__all__ = ["MODEL_NAME", "LocalJudge"]
