"""Token estimates: a prompt's tokens (tiktoken when it is installed and its encoding on disk, else four characters a
token; ``prompt_tokens`` adds each chat message's format tokens) and the answer's (a figure per judged item, or the
answer cap), reserved before a call is sent."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
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

__all__ = ["BUDGET_OUTPUT_CAP", "MESSAGE_TOKENS", "OUTPUT_TOKENS_BASE", "OUTPUT_TOKENS_PER_ITEM",
           "OUTPUT_TOKENS_RUBRIC", "OUTPUT_TOKENS_TEXT", "REPLY_TOKENS",
           "count_tokens", "output_estimate", "prompt_tokens"]


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


# The chat format's own tokens, as tiktoken's documentation counts them for OpenAI's chat models (the OpenAI cookbook's
# "How to count tokens with tiktoken", ``num_tokens_from_messages``, for gpt-3.5-turbo-0613 and later, gpt-4, gpt-4o):
# every message costs MESSAGE_TOKENS besides its role's and its text's tokens (one more with a ``name``), and every
# reply is primed with REPLY_TOKENS. Billed as prompt tokens: a system and a user message cost 11 more than their text.
MESSAGE_TOKENS = 3
REPLY_TOKENS = 3
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function",
          "developer": "developer", "chat": "user"}


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text blocks of a list of content blocks (images are not counted)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") in ("text", "output_text", "input_text"):
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return str(content)


def _role_text_name(message: Any) -> tuple[str, str, str | None]:
    """(role, text, name) of one message: a ``(role, text)`` pair, an OpenAI-style dict, a LangChain message, or a
    plain string (a user message)."""
    if isinstance(message, str):
        return "user", message, None
    if isinstance(message, tuple):
        return str(message[0]), _text_of(message[1]), None
    if isinstance(message, Mapping):
        return str(message.get("role") or "user"), _text_of(message.get("content")), message.get("name")
    kind = str(getattr(message, "type", "human"))
    role = str(getattr(message, "role", "") or _ROLES.get(kind, kind)) if kind == "chat" else _ROLES.get(kind, kind)
    return role, _text_of(getattr(message, "content", message)), getattr(message, "name", None)


def prompt_tokens(messages: str | Sequence[Any], model_name: str | None = None) -> int:
    """The prompt tokens a chat request of ``messages`` is billed for: each message's role and text (``count_tokens``)
    plus the chat format's tokens, ``MESSAGE_TOKENS`` a message (one more with a name) and ``REPLY_TOKENS`` priming the
    reply, as tiktoken's documentation counts OpenAI's chat models. ``messages``: LangChain messages, ``(role, text)``
    pairs, OpenAI-style dicts, or one string (one user message). The one place a prompt's tokens are counted: the
    budget's reservation before each call (``CallSpend.estimate``), ``contextjudge estimate`` and the goldens
    generator's ``--dry-run``. The answer schema a structured call sends is counted apart
    (``judges._structured.schema_tokens``)."""
    if isinstance(messages, str):
        messages = [messages]
    if not messages:
        return 0
    n = REPLY_TOKENS
    for message in messages:
        role, text, name = _role_text_name(message)
        n += MESSAGE_TOKENS + count_tokens(role, model_name) + count_tokens(text, model_name)
        if name:
            n += 1 + count_tokens(str(name), model_name)
    return n


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
