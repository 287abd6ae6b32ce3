"""``llama_index.core.evaluation`` names for a first test set: ``generate_question_context_pairs``.

    from contextjudge_llama_index.evaluation import generate_question_context_pairs   # was: llama_index.core...
    qa = generate_question_context_pairs(nodes, llm=llm, num_questions_per_chunk=2)
    RetrieverEvaluator.from_metric_names(["hit_rate", "mrr"], retriever=retriever).evaluate_dataset(qa)

The pairs come from contextjudge's generator (``contextjudge.goldens.generate``): questions in contextjudge's styles
(short, conversational, multi-part), near-duplicates dropped, each checked by the judge (the embedded judge unless
``judge=`` says otherwise) before it is kept; the result is LlamaIndex's own ``EmbeddingQAFinetuneDataset``
(queries, corpus, relevant_docs keyed by your nodes' ids) where the installed LlamaIndex still ships it, else the
class of that shape defined here (llama-index-core 0.14 no longer does). ``llm`` is a LlamaIndex LLM (called through its
``chat``/``achat``) or a LangChain chat model. ``qa_generate_prompt_tmpl`` is accepted and not used: the prompt is
contextjudge's, which asks for the answer too (for the answers, call ``contextjudge.goldens.generate``).
"""

from __future__ import annotations

from typing import Any

from contextjudge.errors import ConfigurationError
from contextjudge.goldens import generate

__all__ = ["EmbeddingQAFinetuneDataset", "generate_question_context_pairs"]

_STYLES = ("short", "multi_part", "conversational")


class EmbeddingQAFinetuneDataset:
    """LlamaIndex's question/context pairs: ``queries`` (id -> question), ``corpus`` (node id -> text),
    ``relevant_docs`` (question id -> node ids), ``mode`` "text"; ``save_json`` / ``from_json`` as LlamaIndex's. Used
    where the installed LlamaIndex does not ship the class."""

    def __init__(self, queries: dict[str, str], corpus: dict[str, str], relevant_docs: dict[str, list[str]],
                 mode: str = "text") -> None:
        self.queries, self.corpus, self.relevant_docs, self.mode = queries, corpus, relevant_docs, mode

    @property
    def query_docid_pairs(self) -> list[tuple[str, list[str]]]:
        """(question, its relevant node ids) pairs."""
        return [(q, self.relevant_docs[qid]) for qid, q in self.queries.items()]

    def save_json(self, path: str) -> None:
        """Write the pairs as LlamaIndex writes them."""
        import json  # noqa: PLC0415

        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"queries": self.queries, "corpus": self.corpus, "relevant_docs": self.relevant_docs,
                       "mode": self.mode}, fh, indent=4)

    @classmethod
    def from_json(cls, path: str) -> EmbeddingQAFinetuneDataset:
        """Read pairs written by ``save_json`` (or LlamaIndex's)."""
        import json  # noqa: PLC0415

        with open(path, encoding="utf-8") as fh:
            return cls(**json.load(fh))


def _dataset_class() -> Any:
    for mod in ("llama_index.core.evaluation", "llama_index.finetuning"):
        try:
            return __import__(mod, fromlist=["EmbeddingQAFinetuneDataset"]).EmbeddingQAFinetuneDataset
        except (ImportError, AttributeError):
            continue
    return EmbeddingQAFinetuneDataset


def _chat_model(llm: Any) -> Any:
    """``llm`` as a LangChain chat model: as it is, or a LlamaIndex LLM behind LangChain's interface."""
    from langchain_core.language_models import BaseChatModel  # noqa: PLC0415

    if isinstance(llm, (BaseChatModel, str)):
        return llm
    if not (hasattr(llm, "chat") and hasattr(llm, "achat")):
        raise ConfigurationError(f"llm must be a LlamaIndex LLM or a LangChain chat model, not {type(llm).__name__}.")
    from langchain_core.messages import AIMessage  # noqa: PLC0415
    from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: PLC0415
    from llama_index.core.llms import ChatMessage  # noqa: PLC0415
    from pydantic import ConfigDict  # noqa: PLC0415

    def convert(messages: list[Any]) -> list[Any]:
        role = {"system": "system", "human": "user", "ai": "assistant"}
        return [ChatMessage(role=role.get(m.type, "user"), content=str(m.content)) for m in messages]

    class LlamaIndexChat(BaseChatModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        llm: Any
        model_name: str = ""

        @property
        def _llm_type(self) -> str:
            return "llama-index"

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            out = self.llm.chat(convert(messages))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(str(out.message.content or "")))])

        async def _agenerate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> ChatResult:
            out = await self.llm.achat(convert(messages))
            return ChatResult(generations=[ChatGeneration(message=AIMessage(str(out.message.content or "")))])

    name = getattr(getattr(llm, "metadata", None), "model_name", None) or type(llm).__name__
    return LlamaIndexChat(llm=llm, model_name=str(name))


def generate_question_context_pairs(nodes: Any, llm: Any, qa_generate_prompt_tmpl: Any = None,
                                    num_questions_per_chunk: int = 2, *, judge: Any = "local") -> Any:
    """LlamaIndex's ``generate_question_context_pairs``: checked questions per node, as an
    ``EmbeddingQAFinetuneDataset`` keyed by the nodes' ids (the question ids are the goldens' ids)."""
    nodes = list(nodes)
    res = generate(nodes, model=_chat_model(llm), per_chunk=num_questions_per_chunk, styles=_STYLES, judge=judge)
    if not res.goldens:
        why = ", ".join(sorted({d["reason"] for d in res.dropped})) or "none asked"
        raise ConfigurationError(f"no golden was kept from {len(nodes)} node(s) (dropped: {why}): check that the llm "
                                 "answers with the JSON it is asked for, or try a stronger model.")
    corpus = {str(getattr(n, "node", n).node_id): getattr(n, "node", n).get_content() for n in nodes}
    queries = {g["id"]: g["input"] for g in res.goldens}
    relevant = {g["id"]: list(g["expected_context_ids"]) for g in res.goldens}
    return _dataset_class()(queries=queries, corpus=corpus, relevant_docs=relevant, mode="text")
