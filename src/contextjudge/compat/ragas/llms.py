"""``ragas.llms`` names: ``LangchainLLMWrapper``, ``LlamaIndexLLMWrapper``, ``llm_factory``.

They hold the judge and hand it to contextjudge: a LangChain chat model (``LangchainLLMWrapper(ChatOpenAI(...))``)
is the judge as it is; ``llm_factory("gpt-4o-mini", client=AsyncOpenAI(...))`` is an OpenAI chat model on that
client's endpoint and key; ``llm_factory("local")`` is the embedded offline judge. Nothing of the model is changed
(Ragas sets ``temperature`` and ``n`` on the model it wraps; contextjudge never does).
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError

__all__ = ["BaseRagasLLM", "InstructorLLM", "LangchainLLMWrapper", "LlamaIndexLLMWrapper", "judge_of", "llm_factory"]


class BaseRagasLLM:
    """A judge in Ragas' clothes: ``judge`` is what contextjudge's metrics are given as ``model=``."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.judge!r})"


class LangchainLLMWrapper(BaseRagasLLM):
    """``LangchainLLMWrapper(langchain_llm)``: any LangChain chat model as the judge (run_config, cache and the
    bypass flags are accepted and not needed)."""

    def __init__(self, langchain_llm: Any, run_config: Any = None, is_finished_parser: Any = None, cache: Any = None,
                 bypass_temperature: bool = False, bypass_n: bool = False) -> None:
        super().__init__(langchain_llm)
        self.langchain_llm = langchain_llm
        self.run_config = run_config


class LlamaIndexLLMWrapper(BaseRagasLLM):
    """``LlamaIndexLLMWrapper(llm)``: not a judge contextjudge can call (it calls LangChain chat models); the error
    says what to pass instead."""

    def __init__(self, llm: Any, run_config: Any = None, cache: Any = None) -> None:
        raise ConfigurationError(
            "contextjudge judges with LangChain chat models: wrap the same model's LangChain class instead, e.g. "
            "LangchainLLMWrapper(ChatOpenAI(model=...)), or pass llm='local' for the embedded judge.")


class InstructorLLM(BaseRagasLLM):
    """What ``llm_factory`` returns."""


def llm_factory(model: Any = "gpt-4o-mini", provider: str = "openai", client: Any = None, adapter: str = "auto",
                cache: Any = None, **kwargs: Any) -> InstructorLLM:
    """``llm_factory(model, client=...)``: ``"local"`` (the embedded judge), a LangChain chat model, or an OpenAI
    model name, on ``client``'s base URL and key when an ``openai`` client is given."""
    from ...judges import local_spec  # noqa: PLC0415 - the judges package loads on first use

    if not isinstance(model, str) or local_spec(model) or model.startswith("@"):
        return InstructorLLM(model)
    if provider not in ("openai", None):
        raise ConfigurationError(f"llm_factory(provider={provider!r}): contextjudge builds OpenAI-compatible judges "
                                 "here; for another provider pass its LangChain chat model, e.g. "
                                 "LangchainLLMWrapper(ChatAnthropic(model=...)).")
    if client is None:
        return InstructorLLM(model)
    from langchain_openai import ChatOpenAI  # noqa: PLC0415 - an OpenAI judge needs it anyway

    base_url = getattr(client, "base_url", None)
    api_key = getattr(client, "api_key", None)
    return InstructorLLM(ChatOpenAI(model=model, base_url=str(base_url) if base_url else None, api_key=api_key,
                                    temperature=0, **kwargs))


def judge_of(llm: Any) -> Any:
    """The ``model=`` contextjudge's metrics get for a Ragas ``llm=``: the wrapped model, or ``llm`` itself."""
    if llm is None:
        return None
    if isinstance(llm, BaseRagasLLM):
        return llm.judge
    for attr in ("langchain_llm", "llm"):  # Ragas' own wrappers, if one is passed
        inner = getattr(llm, attr, None)
        if inner is not None and hasattr(inner, "invoke"):
            return inner
    return llm
