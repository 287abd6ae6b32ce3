"""The price table: dollars per million input/output tokens by model name, from ``contextjudge/data/prices.json``
and ``register_prices``; ``price_of`` looks a judge up (None when unknown)."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigurationError

__all__ = ["Price", "price_of", "register_prices"]


@dataclass(frozen=True)
class Price:
    """Dollars per million input and output tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollars for these tokens at this price (prices are per million tokens)."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


_TABLE: dict[str, Price] | None = None
_REGISTERED: dict[str, Price] = {}
_TABLE_LOCK = threading.Lock()
# a dated or aliased release of a listed model costs what the model does: gpt-4o-mini-2024-07-18,
# claude-3-5-haiku-20241022, claude-3-5-haiku-latest, gemini-2.0-flash-001
_SUFFIX = re.compile(r"^-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest|\d{3})$")


def _price(value: Any, name: str) -> Price:
    if isinstance(value, Price):
        return value
    if isinstance(value, Mapping):
        inp, out = value.get("input"), value.get("output")
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        inp, out = value
    else:
        inp = out = None
    for v in (inp, out):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise ConfigurationError(f"price of {name!r} must be {{'input': dollars, 'output': dollars}} per million "
                                     f"tokens (numbers >= 0), or (input, output); got {value!r}.")
    return Price(float(inp), float(out))  # type: ignore[arg-type]


def _table() -> dict[str, Price]:
    global _TABLE
    if _TABLE is None:
        with _TABLE_LOCK:
            if _TABLE is None:
                from importlib import resources  # noqa: PLC0415 - read once, on first use

                raw = json.loads(resources.files("contextjudge").joinpath("data/prices.json").read_text("utf-8"))
                _TABLE = {k.lower(): _price(v, k) for k, v in (raw.get("models") or {}).items()}
    return _TABLE


def register_prices(prices: Mapping[str, Any]) -> None:
    """Add or correct judge prices: ``{"model-name": {"input": 0.4, "output": 1.6}}`` in dollars per million tokens
    (or ``(input, output)``). Names match the judge's model name, case-insensitively, and its dated releases."""
    if not isinstance(prices, Mapping):
        raise ConfigurationError("register_prices takes a mapping {'model-name': {'input': ..., 'output': ...}}.")
    parsed = {str(k).strip().lower(): _price(v, str(k)) for k, v in prices.items()}
    with _TABLE_LOCK:
        _REGISTERED.update(parsed)


def _model_name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    from .._naming import judge_name  # noqa: PLC0415

    try:
        return judge_name(model)
    except Exception:  # noqa: BLE001
        return None


def price_of(model: Any) -> Price | None:
    """The price of a judge (a model name or a chat model), or None when it is not known. A provider prefix
    (``openai:``, ``models/``) is ignored, and a dated release (``gpt-4o-mini-2024-07-18``) costs what its model does."""
    name = _model_name(model)
    if not name:
        return None
    key = name.strip().lower()
    for prefix in ("models/", "openai:", "anthropic:", "google_genai:", "google_vertexai:", "google:"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    table = _table()
    for source in (_REGISTERED, table):
        hit = source.get(key)
        if hit is not None:
            return hit
    best: tuple[int, Price] | None = None
    for source in (_REGISTERED, table):
        for base, price in source.items():
            if key.startswith(base) and _SUFFIX.match(key[len(base):]) and (best is None or len(base) > best[0]):
                best = (len(base), price)
        if best is not None:
            return best[1]
    return None
