"""Token estimates: a prompt's tokens (tiktoken when it is installed and its encoding on disk, else four characters a
token) and the answer's (a figure per judged item, or the answer cap), reserved before a call is sent."""

from __future__ import annotations

import os
import re
from typing import Any

from .._families import (
    NODE_USEFULNESS,
    OUTPUT_TOKENS_BASE,
    OUTPUT_TOKENS_PER_ITEM,
    OUTPUT_TOKENS_RUBRIC,
    OUTPUT_TOKENS_TEXT,
    VerdictFamily,
    find_family,
)

__all__ = ["BUDGET_OUTPUT_CAP", "OUTPUT_TOKENS_BASE", "OUTPUT_TOKENS_PER_ITEM", "OUTPUT_TOKENS_RUBRIC",
           "OUTPUT_TOKENS_TEXT",
           "count_tokens", "output_estimate"]


# the answer tokens reserved per judged item and per answer, for a score and for a free-text reason: the verdict
# families' (``VerdictFamily.output_tokens``)
# the answer cap of a billable judge under a token or dollar budget when neither JudgeOptions.max_output_tokens nor the
# model's own max_tokens sets one: each request reserves this much answer (given back when it settles), so a
# request never spends more than it reserved
BUDGET_OUTPUT_CAP = 2048
_ENCODERS: dict[str, Any] = {}
_NO_TIKTOKEN = object()


def _encoder(model_name: str | None) -> Any:
    """A tiktoken encoding for ``model_name`` when tiktoken is installed and the encoding is already on disk (this
    never downloads: offline it would hang), else None."""
    enc_name = "o200k_base" if model_name and re.match(r"(gpt-4o|gpt-4\.1|gpt-5|o\d)", model_name.lower()) \
        else "cl100k_base"
    hit = _ENCODERS.get(enc_name)
    if hit is not None:
        return None if hit is _NO_TIKTOKEN else hit
    enc: Any = _NO_TIKTOKEN
    try:
        import hashlib  # noqa: PLC0415

        cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
        if not cache:
            try:
                from importlib.util import find_spec  # noqa: PLC0415

                spec = find_spec("llama_index.core")
                if spec is not None and spec.submodule_search_locations:
                    found = os.path.join(list(spec.submodule_search_locations)[0], "_static", "tiktoken_cache")
                    if os.path.isdir(found):
                        cache = os.environ["TIKTOKEN_CACHE_DIR"] = found
            except (ImportError, ValueError):
                cache = None
        url = f"https://openaipublic.blob.core.windows.net/encodings/{enc_name}.tiktoken"
        if cache and os.path.exists(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest())):  # noqa: S324
            import tiktoken  # noqa: PLC0415 - optional, loaded on first use

            enc = tiktoken.get_encoding(enc_name)
    except Exception:  # noqa: BLE001 - no tiktoken, or an unreadable cache: four characters a token
        enc = _NO_TIKTOKEN
    _ENCODERS[enc_name] = enc
    return None if enc is _NO_TIKTOKEN else enc


def count_tokens(text: str, model_name: str | None = None) -> int:
    """Tokens of ``text`` for ``model_name``: tiktoken's count when available, else about four characters a token."""
    if not text:
        return 0
    enc = _encoder(model_name)
    if enc is not None:
        try:
            return len(enc.encode(text, disallowed_special=()))
        except Exception:  # noqa: BLE001
            pass
    return max(1, (len(text) + 3) // 4)


def output_estimate(task: str | VerdictFamily | None, items: int, max_output_tokens: int | None = None) -> int:
    """The answer tokens a call reserves: ``max_output_tokens`` when set, else its verdict family's figure
    (``VerdictFamily.output_tokens``: per judged item, or one score) for ``task`` (a family or its task's name; None:
    a text answer)."""
    if max_output_tokens:
        return int(max_output_tokens)
    if task is None:
        return OUTPUT_TOKENS_TEXT
    # a name no family has (a call recorded by another version) is sized as a per-item family's
    fam = task if isinstance(task, VerdictFamily) else find_family(task) or NODE_USEFULNESS
    return fam.output_tokens(items)
