"""What a judge is called and what identifies it: the name results show and the identity verdict-cache keys hold.

Kept apart from ``models`` (which resolves the ``model`` argument, calibration files included) so that the judges
that wrap other judges (``calibration``, ``tiered``) can name what they wrap without importing the resolver.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["judge_identity", "judge_name"]

_SECRET_HINTS = ("key", "token", "secret", "password", "credential", "auth")


def _public_params(model: Any) -> dict[str, Any]:
    try:
        params = dict(model._identifying_params)  # noqa: SLF001 - LangChain's documented identity hook
    except Exception:  # noqa: BLE001
        params = {}
    out = {}
    for k, v in params.items():
        if any(h in k.lower() for h in _SECRET_HINTS):
            continue
        out[k] = v
    return out


def judge_identity(model: Any) -> str:
    """A stable id for the judge and the parameters that can change its answers (no secrets)."""
    payload = {"class": f"{type(model).__module__}.{type(model).__qualname__}", "params": _public_params(model)}
    raw = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def judge_name(model: Any) -> str:
    """A human-readable judge name for results and reports."""
    params = _public_params(model)
    for key in ("model_name", "model", "model_id", "judge"):
        if params.get(key):
            return str(params[key])
    try:
        return model._llm_type  # noqa: SLF001
    except Exception:  # noqa: BLE001
        return type(model).__name__
