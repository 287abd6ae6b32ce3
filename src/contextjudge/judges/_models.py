"""Which chat model judges: resolve the ``model`` argument and name a judge for cache keys."""

from __future__ import annotations

import logging
import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from ..errors import ConfigurationError, ConfigurationTypeError, JudgeUnavailableError
from ._calibration import CalibratedJudge, Calibration
from ._jury import Jury as _JuryCore
from ._naming import judge_identity, judge_name

__all__ = ["Jury", "judge_identity", "judge_name", "load_calibrated_judge", "parse_jury", "resolve_model"]

logger = logging.getLogger("contextjudge")

DEFAULT_OPENAI_MODEL = "gpt-4.1-mini"


# model strings of the embedded judge, and of its stacked form (LocalJudge(cross_encoder=True): the cross-encoder
# reads what the bi-encoder does not rule out; opt-in, docs/judges.md "The cross-encoder")
LOCAL_NAMES = ("local", "embedded", "offline")
LOCAL_CROSS_NAMES = ("local-cross", "local+cross", "embedded-cross")
# the cascade (LocalJudge(cross_encoder="unsure")): the cross-encoder read only where the bi-encoder is unsure
LOCAL_CASCADE_NAMES = ("local-cascade", "embedded-cascade")


def local_spec(model: str) -> str | None:
    """``"local"``, ``"local-cross"`` or ``"local-cascade"`` when the model string names one of the embedded judges
    (any spelling, any case), else None: what resolve_model, estimates and the compat layers read a string as."""
    name = model.strip().lower()
    return ("local" if name in LOCAL_NAMES else "local-cross" if name in LOCAL_CROSS_NAMES
            else "local-cascade" if name in LOCAL_CASCADE_NAMES else None)


def _local(cross_encoder: bool | str = False) -> BaseChatModel:
    try:
        from ._local import LocalJudge  # noqa: PLC0415 - optional heavy import, loaded on demand
    except ImportError as exc:
        raise JudgeUnavailableError(
            "The embedded judge (model='local') could not be loaded: "
            f"{exc}. Install it with: pip install 'contextjudge[local]'"
        ) from exc
    return LocalJudge(cross_encoder=cross_encoder)


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

    A ``BaseChatModel`` is used as it is. ``"local"`` is the embedded offline judge, ``"local-cross"`` the same with
    its cross-encoder reading the pairs it does not rule out (``LocalJudge(cross_encoder=True)``), ``"local-cascade"``
    with it reading only those the bi-encoder is unsure of (``LocalJudge(cross_encoder="unsure")``). ``"@path/to/file.json"`` (or a
    ``pathlib.Path``) is a calibration file written by ``contextjudge calibrate``: the judge it names, with the
    thresholds fitted on your labels (``judges._calibration``). Another string is an OpenAI model name, optionally
    prefixed ``openai:``. ``"jury:local,openai:gpt-4o-mini"`` is a ``Jury`` of those judges (``judges._jury``). ``None`` reads ``CONTEXTJUDGE_MODEL``; failing that, OpenAI's
    default model when ``OPENAI_API_KEY`` is set; failing that, the embedded judge (with one log line).
    """
    if isinstance(model, BaseChatModel):
        return model
    if isinstance(model, os.PathLike) or (isinstance(model, str) and model.strip().startswith("@")):
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
        spec = local_spec(name)
        if spec:
            kinds: dict[str, bool | str] = {"local-cross": True, "local-cascade": "unsure"}
            return _local(cross_encoder=kinds.get(spec, False))
        if name.lower().startswith(("jury:", "jury[")):
            return parse_jury(name)
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


def load_calibrated_judge(path: str | os.PathLike[str], judge: BaseChatModel | None = None) -> CalibratedJudge:
    """The judge a calibration file names (or ``judge``, when given), calibrated by the file's thresholds.

    Warns when the judge's identity differs from the one the thresholds were fitted for (an upgraded embedded judge,
    another model under the same name): the thresholds may no longer fit it.
    """
    cal = Calibration.read(path)
    if judge is None:
        judge = resolve_model(cal.judge)
    if isinstance(judge, CalibratedJudge):
        judge = judge.judge  # thresholds replace thresholds; they never stack
    if cal.judge_identity and cal.judge_identity != judge_identity(judge):
        logger.warning("contextjudge: %s was fitted for another version or setting of the judge %r (identity %s, "
                       "now %s); run `contextjudge calibrate` again so the thresholds fit this one.",
                       cal.path, cal.judge, cal.judge_identity, judge_identity(judge))
    return calibrated(judge, cal)


def calibrated(judge: BaseChatModel, cal: Calibration) -> CalibratedJudge:
    """``judge`` judging with ``cal``: its thresholds, and for the embedded judge its fitted weights (given to a
    copy of it, whose identity carries their hash)."""
    if isinstance(judge, CalibratedJudge):
        judge = judge.judge
    if cal.learned or cal.memory:
        if "learned" in getattr(type(judge), "model_fields", {}):
            judge = judge.model_copy(update={"learned": cal.learned or None, "memory": cal.memory or None})
        else:
            logger.warning("contextjudge: %s holds weights fitted for the embedded judge, and %s is not it: only its "
                           "thresholds apply.", cal.path or "the calibration", judge_name(judge))
    return CalibratedJudge(judge=judge, calibration=cal)


class Jury(_JuryCore):
    """A jury of judges (``judges._jury``): ``Jury(["local", ChatOpenAI(...)], aggregate="majority" | "mean" |
    "weighted", weights=...)``; each juror is a chat model or a model string ``model=`` takes."""

    def __init__(self, jurors: Any, aggregate: str = "majority", weights: Any = None, **kwargs: Any) -> None:
        if isinstance(jurors, (list, tuple)):
            jurors = [resolve_model(j) for j in jurors]
        super().__init__(jurors, aggregate=aggregate, weights=weights, **kwargs)


def parse_jury(spec: str) -> Jury:
    """The jury a model string names: ``"jury:local,openai:gpt-4o-mini"`` (``jury[mean]:...`` or
    ``jury[weighted]:...`` for another aggregate; weighted with equal weights until ``Jury.weights_from`` gives
    some)."""
    head, _, rest = spec.strip().partition(":")
    aggregate = "majority"
    if head.lower().startswith("jury[") and head.endswith("]"):
        aggregate = head[5:-1].strip().lower()
    names = [p.strip() for p in rest.split(",") if p.strip()]
    if len(names) < 2:
        raise ConfigurationError(f"model={spec!r}: a jury needs at least two jurors, separated by commas, e.g. "
                                 "'jury:local,openai:gpt-4o-mini'.")
    return Jury(names, aggregate=aggregate)
