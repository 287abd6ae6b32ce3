"""Which chat model judges: resolve the ``model`` argument and name a judge for cache keys."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from ..errors import ConfigurationError, ConfigurationTypeError, JudgeUnavailableError

__all__ = ["judge_identity", "judge_name", "resolve_model"]

logger = logging.getLogger("contextjudge")

DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"
_SECRET_HINTS = ("key", "token", "secret", "password", "credential", "auth")


def _local() -> BaseChatModel:
    try:
        from .local import LocalJudge  # noqa: PLC0415 - optional heavy import, loaded on demand
    except ImportError as exc:
        raise JudgeUnavailableError(
            "The embedded judge (model='local') could not be loaded: "
            f"{exc}. Install it with: pip install 'contextjudge[local]'"
        ) from exc
    return LocalJudge()


def _openai(name: str) -> BaseChatModel:
    try:
        from langchain_openai import ChatOpenAI  # noqa: PLC0415
    except ImportError as exc:
        raise JudgeUnavailableError(
            f"model={name!r} means an OpenAI chat model, which needs the openai extra: "
            "pip install 'contextjudge[openai]'. Or pass any LangChain chat model object as model=, "
            "or model='local' for the offline embedded judge."
        ) from exc
    try:
        return ChatOpenAI(model=name, temperature=0)
    except Exception as exc:  # noqa: BLE001 - the SDK refuses to build a client without credentials
        raise JudgeUnavailableError(
            f"model={name!r} means an OpenAI chat model, which could not be created: {exc} Set OPENAI_API_KEY, "
            "pass ChatOpenAI(api_key=..., base_url=...) as model=, or model='local' for the offline embedded judge."
        ) from exc


def resolve_model(model: Any = None) -> BaseChatModel:
    """Turn the ``model`` argument of a metric into a LangChain chat model.

    A ``BaseChatModel`` is used as it is. ``"local"`` is the embedded offline judge. ``"@path/to/file.json"`` (or a
    ``pathlib.Path``) is a calibration file written by ``contextjudge calibrate``: the judge it names, with the
    thresholds fitted on your labels (``judges.calibration``). Another string is an OpenAI model name, optionally
    prefixed ``openai:``. ``None`` reads ``CONTEXTJUDGE_MODEL``; failing that, OpenAI's
    default model when ``OPENAI_API_KEY`` is set; failing that, the embedded judge (with one log line).
    """
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, os.PathLike) or (isinstance(model, str) and model.strip().startswith("@")):
        from .calibration import load_calibrated_judge  # noqa: PLC0415 - only a calibration file needs it

        path = os.fspath(model) if isinstance(model, os.PathLike) else model.strip()[1:]
        if not path:
            raise ConfigurationError("model='@' names no calibration file: write model='@path/to/file.json'.")
        return load_calibrated_judge(path)
    if model is None:
        env = os.environ.get("CONTEXTJUDGE_MODEL")
        if env:
            return resolve_model(env)
        if os.environ.get("OPENAI_API_KEY"):
            return _openai(DEFAULT_OPENAI_MODEL)
        logger.info("contextjudge: no judge model given and no OPENAI_API_KEY; using the embedded offline judge "
                    "(model='local'). Pass model=... or set CONTEXTJUDGE_MODEL to choose another.")
        return _local()
    if isinstance(model, str):
        name = model.strip()
        if name.lower() in ("local", "embedded", "offline"):
            return _local()
        if ":" in name:
            provider, _, rest = name.partition(":")
            if provider.lower() == "openai":
                return _openai(rest)
            try:
                from langchain.chat_models import init_chat_model  # noqa: PLC0415 - optional
            except ImportError as exc:
                raise JudgeUnavailableError(
                    f"model={name!r}: provider {provider!r} needs the 'langchain' package (init_chat_model) and that "
                    f"provider's integration (pip install langchain langchain-{provider.lower()}). Or pass a "
                    "LangChain chat model object as model=."
                ) from exc
            try:
                return init_chat_model(name)
            except ImportError as exc:  # the provider's integration package is missing
                raise JudgeUnavailableError(
                    f"model={name!r}: the {provider!r} provider's LangChain integration is not installed ({exc}). "
                    f"Install it (for example pip install langchain-{provider.lower()}), or pass a LangChain chat "
                    "model object as model=."
                ) from exc
            except ValueError as exc:  # a provider init_chat_model does not know, or a bad name
                raise JudgeUnavailableError(
                    f"model={name!r}: LangChain's init_chat_model could not make a chat model from it ({exc}). Use "
                    "'provider:model' with a provider it supports (openai, anthropic, ollama, ...), or pass a "
                    "LangChain chat model object as model=."
                ) from exc
        return _openai(name)
    raise ConfigurationTypeError(
        f"model must be a LangChain chat model, a model name string, 'local', '@calibration.json' or None, not "
        f"{type(model).__name__}. "
        "Wrap other clients in a LangChain BaseChatModel."
    )


def _public_params(model: BaseChatModel) -> dict[str, Any]:
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


def judge_identity(model: BaseChatModel) -> str:
    """A stable id for the judge and the parameters that can change its answers (no secrets)."""
    payload = {"class": f"{type(model).__module__}.{type(model).__qualname__}", "params": _public_params(model)}
    raw = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:20]


def judge_name(model: BaseChatModel) -> str:
    """A human-readable judge name for results and reports."""
    params = _public_params(model)
    for key in ("model_name", "model", "model_id", "judge"):
        if params.get(key):
            return str(params[key])
    try:
        return model._llm_type  # noqa: SLF001
    except Exception:  # noqa: BLE001
        return type(model).__name__
