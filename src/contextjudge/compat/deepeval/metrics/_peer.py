"""What the DeepEval-named metrics add to contextjudge's: DeepEval's constructor order and ``flaky``, prompt
templates written DeepEval's way, ``verbose_mode`` printing, and DeepEval's built-in exception bases.

Scoring is contextjudge's own: the same metric classes, judge client, verdict cache and run context. A custom
template changes only the prompt text; contextjudge still builds the request, names every judged item by id, and
parses and validates the answer by those ids (re-asking for missing ones), so a template cannot make a skipped node
or a malformed answer into a score.
"""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

from ....errors import JudgeUnavailableError
from ....judges import BaseTemplate, JudgeRequest, render_items, render_sentences_by_node, render_verdict_format
from .._verbose import print_verbose
from ..errors import MultimodalJudgeError

__all__ = ["PeerMetric", "PeerTemplate", "adapt_template", "default_prompt"]

_CASE: contextvars.ContextVar[Any] = contextvars.ContextVar("contextjudge_compat_case", default=None)


class PeerTemplate:
    """Base of the DeepEval-named template classes (``ContextualPrecisionTemplate`` ...).

    Their static methods take DeepEval's keyword arguments. Left as they are, contextjudge's own prompt is used;
    override ``generate_verdicts`` (and/or ``generate_reason``) in a subclass and pass it as ``evaluation_template=``
    to send your prompt instead.
    """

    _ours: Any = BaseTemplate

    @staticmethod
    def generate_verdicts(**kwargs: Any) -> str:  # each metric's template class defines it (contextjudge's prompt)
        raise NotImplementedError

    @classmethod
    def generate_reason(cls, **kwargs: Any) -> str:
        """contextjudge's reason prompt for DeepEval's keyword arguments (``score``, and the verdicts or reasons)."""
        notes = kwargs.get("verdicts") or [*(kwargs.get("supportive_reasons") or []),
                                           *(kwargs.get("unsupportive_reasons") or []),
                                           *(kwargs.get("irrelevant_statements") or [])] or kwargs.get("reasons") or []
        score = kwargs.get("score", kwargs.get("final_score", 0.0))
        name = cls.__name__.replace("Template", "")
        return cls._ours.generate_reason(name, float(score or 0.0), "\n".join(str(n) for n in notes))


# the prompts a peer template asks for, by the name it passes: the verdict family and what the reference is
# (faithfulness asks statement support of the answer's own statements)
_PROMPTS: dict[str, tuple[str, str | None]] = {
    "node_usefulness": ("node_usefulness", "expected_output"),
    "statement_support": ("statement_support", "expected_output"),
    "sentence_relevance": ("sentence_relevance", None),
    "answer_support": ("statement_support", "actual_output"),
    "answer_relevance": ("answer_relevance", "actual_output")}


def default_prompt(task: str, ours: Any, kwargs: dict[str, Any]) -> str:
    """contextjudge's own prompt for DeepEval's keyword arguments (so an override can extend the default)."""
    from ...._text import split_sentences  # noqa: PLC0415
    from ....judges import Item, family  # noqa: PLC0415

    nodes = kwargs.get("retrieval_context") or kwargs.get("context_to_display") or []
    if isinstance(nodes, str):
        nodes = [nodes]
    nodes = [str(getattr(n, "text", n)) for n in nodes]
    reference = kwargs.get("expected_output") or kwargs.get("expected_outcome")
    question = str(kwargs.get("input") or "")
    fam_name, kind = _PROMPTS[task]
    fam = family(fam_name)
    if fam.judges_answer(kind):  # faithfulness, answer relevancy: the answer's statements
        answer = str(kwargs.get("actual_output") or "")
        claims = kwargs.get("claims") or kwargs.get("statements") or split_sentences(answer)
        items = [Item(id=f"s{j}", text=str(c)) for j, c in enumerate(claims, 1)]
        req = JudgeRequest(task=fam.task, family=fam.name, input=question,
                           reference=answer or " ".join(map(str, claims)), reference_kind="actual_output", items=items,
                           context=[Item(id=f"n{k}", text=t) for k, t in enumerate(nodes, 1)]
                           if fam.cites_context else [])
    elif fam.item_kind == "nodes":
        req = JudgeRequest(task=fam.task, input=question, reference=reference, reference_kind="expected_output",
                           items=[Item(id=f"n{k}", text=t) for k, t in enumerate(nodes, 1)])
    elif fam.cites_context:
        req = JudgeRequest(task=fam.task, input=question, reference=reference, reference_kind="expected_output",
                           items=[Item(id=f"s{j}", text=s) for j, s in enumerate(split_sentences(reference or ""), 1)],
                           context=[Item(id=f"n{k}", text=t) for k, t in enumerate(nodes, 1)])
    else:
        texts = [str(kwargs.get("context") or "")] if kwargs.get("context") is not None else nodes
        req = JudgeRequest(task=fam.task, input=question, items=[
            Item(id=f"n{k}.s{j}", text=s, parent=f"n{k}") for k, t in enumerate(texts, 1)
            for j, s in enumerate(split_sentences(t), 1)])
    return ours.generate_verdicts(req)


def _accepts(fn: Any, pool: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``pool`` that ``fn`` declares (all of them when it takes ``**kwargs``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return dict(pool)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(pool)
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in pool.items() if k in names}


def _node_texts(request: JudgeRequest) -> list[str]:
    """The retrieved nodes of a request, in rank order, as texts."""
    fam = request.verdict_family
    if fam.item_kind == "answer_statements":
        return []  # answer relevancy: the items are the answer's statements, no node is sent
    if fam.cites_context:
        return [c.text for c in request.context]
    if fam.item_kind == "node_sentences":
        nodes: dict[str, list[str]] = {}
        for it in request.items:
            nodes.setdefault(it.parent or it.id.split(".")[0], []).append(it.text)
        return [" ".join(s) for s in nodes.values()]
    return [it.text for it in request.items]


def peer_verdict_kwargs(request: JudgeRequest) -> dict[str, Any]:
    """The keyword arguments DeepEval gives a ``generate_verdicts`` override, from a contextjudge request."""
    nodes = _node_texts(request)
    pool: dict[str, Any] = {
        "input": request.input, "retrieval_context": nodes, "context_to_display": nodes,
        "document_count_str": f" ({len(nodes)} document{'s' if len(nodes) != 1 else ''})",
        "context": "\n\n".join(nodes), "multimodal": any(it.images for it in (*request.items, *request.context)),
        "multimodal_note": "", "strict": True, "content_type": "sentence", "content_type_plural": "sentences",
    }
    if _judges_answer(request):  # faithfulness, answer relevancy: DeepEval's claims / statements
        texts = [it.text for it in request.items]
        pool.update(actual_output=request.reference or " ".join(texts), claims=texts, statements=texts)
    elif request.reference is not None:
        kind = request.reference_kind or "expected_output"
        pool[kind] = request.reference
        pool.setdefault("expected_output", request.reference)
        pool.setdefault("expected_outcome", request.reference)
    return pool


def _judges_answer(request: JudgeRequest) -> bool:
    """Whether the request judges the statements of the app's own answer (faithfulness, answer relevancy)."""
    return request.verdict_family.judges_answer(request.reference_kind)


def _lead(text: str, n: int = 60) -> str:
    """The first ``n`` characters of a node, to name it by (whole words, an ellipsis when cut)."""
    text = " ".join((text or "").split())
    if len(text) <= n:
        return text
    cut = text[:n].rsplit(" ", 1)[0] or text[:n]
    return cut + "\u2026"


def answer_suffix(request: JudgeRequest) -> str:
    """What contextjudge appends to a custom prompt: the ids of the items to judge, and the JSON answer form."""
    ids = [it.id for it in request.items]
    fam = request.verdict_family
    if _judges_answer(request):
        support = fam.cites_context
        return ("\n\nJudge the actual output claim by claim; the claims, each in a tag named by its id:\n"
                f"{render_items(request.items)}\n"
                + ("The retrieval context's nodes are n1, n2, ... in the order given above; node_ids lists the ones "
                   "that support the claim.\n" if support else "")
                + render_verdict_format(ids, with_nodes=support))
    if fam.item_kind == "nodes":
        short = [it.model_copy(update={"text": _lead(it.text)}) for it in request.items]
        return ("\n\nName each node of the retrieval context above by its id, in the order given (each id's node "
                f"begins as shown):\n{render_items(short)}\n"  # the answer form is one, ours
                f"{render_verdict_format(ids)}")
    if fam.cites_context:
        return ("\n\nJudge the expected output sentence by sentence; the sentences, each in a tag named by its id:\n"
                f"{render_items(request.items)}\n"
                "The retrieval context's nodes are n1, n2, ... in the order given above; node_ids lists the ones "
                f"that support the sentence.\n{render_verdict_format(ids, with_nodes=True)}")
    return ("\n\nJudge the context statement by statement; the statements, each after its id:\n"
            f"{render_sentences_by_node(request.items)}\n{render_verdict_format(ids)}")


def _overrides(user: type, name: str) -> Any:
    """``user``'s own ``name`` method when a subclass (not one of ours) defines it, else None."""
    for klass in inspect.getmro(user):
        if klass is PeerTemplate or getattr(klass, "__module__", "").startswith("contextjudge."):
            return None
        if name in vars(klass):
            return getattr(user, name)
    return None


class _Adapted:
    """A DeepEval-style template as contextjudge's judge client uses it (``generate_verdicts(request)``, ...)."""

    def __init__(self, user: type, ours: Any) -> None:
        self.user = user
        self.ours = ours
        self.verdicts_fn = _overrides(user, "generate_verdicts")
        self.reason_fn = _overrides(user, "generate_reason")
        self.__name__ = getattr(user, "__name__", "Template")

    def system(self) -> str:
        return self.ours.system()

    def reask(self, prompt: str, missing_ids: list[str]) -> str:
        return self.ours.reask(prompt, missing_ids)

    def generate_verdicts(self, request: JudgeRequest) -> str:
        if self.verdicts_fn is None:
            return self.ours.generate_verdicts(request)
        text = self.verdicts_fn(**_accepts(self.verdicts_fn, peer_verdict_kwargs(request)))
        if not isinstance(text, str) or not text.strip():
            from ....errors import ConfigurationError  # noqa: PLC0415

            raise ConfigurationError(f"{self.__name__}.generate_verdicts returned {type(text).__name__}, not a "
                                     "prompt: it must return the prompt text as a string.")
        return text + answer_suffix(request)

    def generate_reason(self, metric: str, score: float, composed_reason: str) -> str:
        if self.reason_fn is None:
            return self.ours.generate_reason(metric, score, composed_reason)
        case = _CASE.get()
        verdicts = getattr(case, "_verdicts", None) or []
        pool: dict[str, Any] = {
            "score": f"{score:.2f}", "final_score": score, "reason": composed_reason, "reasons": [composed_reason],
            "verdicts": [{"verdict": v.get("verdict"), "reason": v.get("reason")} for v in verdicts],
            "supportive_reasons": [v.get("reason") for v in verdicts if v.get("verdict") == "yes"],
            "unsupportive_reasons": [v.get("reason") for v in verdicts if v.get("verdict") != "yes"],
            "relevant_statements": [v.get("statement") for v in verdicts if v.get("verdict") == "yes"],
            "irrelevant_statements": [v.get("reason") for v in verdicts if v.get("verdict") != "yes"],
            "multimodal": False, "content_type": "sentence",
        }
        tc = getattr(case, "test_case", None)
        for f in ("input", "expected_output", "expected_outcome", "actual_output"):
            value = getattr(tc, f, None)
            if value is not None:
                pool[f] = value
        text = self.reason_fn(**_accepts(self.reason_fn, pool))
        return f"{text}\n\nAnswer with JSON only: {{\"reason\": \"...\"}}"


def adapt_template(template: Any, ours: Any) -> Any:
    """``template`` as contextjudge's judge client uses it: ours as is, a DeepEval-style class adapted."""
    if template is None:
        return None
    if isinstance(template, type) and issubclass(template, PeerTemplate):
        return _Adapted(template, ours)
    if isinstance(template, type) and not issubclass(template, BaseTemplate) and (
            hasattr(template, "generate_verdicts") or hasattr(template, "generate_reason")):
        return _Adapted(template, ours)  # a DeepEval-style class that does not derive from ours
    return template


class _Reasoning:
    """What the compat ``generate_reason`` needs of the case being scored: kept in a ContextVar for the call."""

    def __init__(self, test_case: Any) -> None:
        self.test_case = test_case
        self._verdicts: list[dict[str, Any]] = []


class PeerMetric:
    """Mixin for the DeepEval-named metrics (put first in the bases)."""

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 async_mode: bool = True, strict_mode: bool = False, verbose_mode: bool = False,
                 evaluation_template: Any = None, flaky: bool = False, **kwargs: Any) -> None:
        for peer_only in ("system_one_model", "eval_mode"):
            kwargs.pop(peer_only, None)
        if threshold is None:  # DeepEval's score-only mode: nothing fails on its score
            threshold = 0.0
        adapted = adapt_template(evaluation_template, self.default_template)  # type: ignore[attr-defined]
        llm_reason = kwargs.pop("llm_reason", None)
        if llm_reason is None:  # a template's own reason prompt is asked for, as DeepEval does
            llm_reason = isinstance(adapted, _Adapted) and adapted.reason_fn is not None
        super().__init__(threshold=threshold, model=model, include_reason=include_reason,  # type: ignore[call-arg]
                         strict_mode=strict_mode, async_mode=async_mode, verbose_mode=verbose_mode,
                         evaluation_template=adapted, llm_reason=llm_reason, **kwargs)
        self.flaky = flaky

    def _check_images(self, found: Any) -> bool:
        try:
            return super()._check_images(found)  # type: ignore[misc]
        except JudgeUnavailableError as exc:  # DeepEval raises ValueError here; ours is one too, and a JudgeError
            raise MultimodalJudgeError(str(exc)) from None

    async def _run(self, test_case: Any) -> Any:
        token = _CASE.set(_Reasoning(test_case))
        try:
            return await super()._run(test_case)  # type: ignore[misc]
        finally:
            _CASE.reset(token)

    async def _llm_reason(self, client: Any, score: float, outcome: Any) -> str:
        case = _CASE.get()
        if case is not None:
            case._verdicts = outcome.verdicts  # noqa: SLF001 - ours
        return await super()._llm_reason(client, score, outcome)  # type: ignore[misc]

    async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float | None:
        score = await super().a_measure(test_case, *args, **kwargs)  # type: ignore[misc]
        if self.verbose_mode:  # type: ignore[attr-defined]
            print_verbose(self)
        return score


class TurnPeerMetric(PeerMetric):
    """Mixin for the DeepEval-named turn metrics: DeepEval's constructor with its ``window_size``."""

    def __init__(self, threshold: float = 0.5, model: Any = None, include_reason: bool = True,
                 async_mode: bool = True, strict_mode: bool = False, verbose_mode: bool = False,
                 evaluation_template: Any = None, window_size: int = 10, flaky: bool = False, **kwargs: Any) -> None:
        super().__init__(threshold=threshold, model=model, include_reason=include_reason, async_mode=async_mode,
                         strict_mode=strict_mode, verbose_mode=verbose_mode, evaluation_template=evaluation_template,
                         flaky=flaky, window_size=window_size, **kwargs)
