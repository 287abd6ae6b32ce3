"""What every metric shares: configuration, the stateless ``a_score``, and the DeepEval-style ``measure``."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import statistics
from typing import Any, ClassVar

from .._aio import run_sync
from .._result import PER_NODE, MetricResult, Usage, is_embedded_judge
from ..cases.testcase import ConversationalTestCase, LLMTestCase, RetrievedNode
from ..errors import (
    ConfigurationError,
    ContextJudgeError,
    InvalidTestCaseError,
    JudgeError,
    JudgeUnavailableError,
    MissingTestCaseParamsError,
)
from ..judges import (
    ImageRequests,
    Item,
    JudgeClient,
    JudgeOptions,
    RunContext,
    current_run_context,
    extract_json_candidates,
    judge_name,
    judge_supports_images,
    judge_view,
    resolve_model,
)
from ..judges import family as judge_family
from ._formulas import fraction

__all__ = ["BaseMetric", "Outcome"]

logger = logging.getLogger("contextjudge")

JUDGE_IDENTITY = "judge_identity"  # the key in MetricResult.details that names the judge identity that scored it


@functools.lru_cache(maxsize=64)
def _template_fingerprint(cls: type) -> str:
    """What a prompt template class says to the judge, as a short hash of its source (its qualified name when
    the source cannot be read)."""
    try:
        text = inspect.getsource(cls)
    except (OSError, TypeError):
        text = f"{cls.__module__}.{cls.__qualname__}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _judge_fingerprint(identity: str, template: Any) -> str:
    """The judge identity a result records: the judge's (model, parameters, calibration) and its prompt
    template's, so a changed prompt shows in ``contextjudge trend`` as a changed judge too."""
    if template is None:
        return identity
    cls = template if isinstance(template, type) else type(template)
    return f"{identity}:{_template_fingerprint(cls)}"


_announced: set[str] = set()


def _announce_default_judge(model: Any) -> None:
    """Say once per process which judge metrics built without ``model=`` got, and why (a JudgeChoiceWarning), unless
    the user chose it through ``CONTEXTJUDGE_MODEL``."""
    import os  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    from ..errors import JudgeChoiceWarning  # noqa: PLC0415

    if os.environ.get("CONTEXTJUDGE_MODEL"):
        return
    name = judge_name(model)
    if name in _announced:
        return
    _announced.add(name)
    if is_embedded_judge(name):
        why = (f"the embedded offline judge {name!r} (free, no API calls): CONTEXTJUDGE_MODEL is not set and there is "
               "no OPENAI_API_KEY")
    else:
        why = f"{name!r} (billed by its provider): CONTEXTJUDGE_MODEL is not set and OPENAI_API_KEY is"
    warnings.warn(f"contextjudge: metrics without model= are judged by {why}. Pass model=... or set "
                  "CONTEXTJUDGE_MODEL to choose the judge.", JudgeChoiceWarning, stacklevel=3)


class Outcome:
    """What a metric computed, before thresholds and reasons are applied."""

    def __init__(self, score: float, verdicts: list[dict[str, Any]], reason: str, usage: Usage | None = None,
                 details: dict[str, Any] | None = None, judged: bool = True,
                 repeat_scores: list[float] | None = None) -> None:
        self.score = score
        self.verdicts = verdicts
        self.reason = reason
        self.usage = usage or Usage()
        self.details = details or {}
        self.judged = judged
        # with judge repeats: the score each repeat's verdicts give (the spread of the case's score)
        self.repeat_scores = repeat_scores


def node_items(nodes: list[RetrievedNode]) -> list[Item]:
    """The nodes of a retrieval as judge items, ids "n1".."nK" in rank order.

    The items are shared (never changed once made: a request that needs other items copies them): every metric
    that judges a case's nodes gets the same ones, made once per case."""
    return [_node_item(k, n.text, tuple(_images_of(n))) for k, n in enumerate(nodes, start=1)]


@functools.lru_cache(maxsize=4096)
def _node_item(rank: int, text: str, images: tuple[str, ...]) -> Item:
    return Item(id=f"n{rank}", text=text, images=list(images))


def _images_of(node: RetrievedNode) -> list[str]:
    imgs = node.metadata.get("_contextjudge_images") if node.metadata else None
    return list(imgs) if isinstance(imgs, list) else []


class BaseMetric:
    """Configuration of one metric. ``a_score`` is stateless; ``measure`` also keeps the last result on the instance.

    Parameters follow DeepEval's: ``threshold`` (pass mark), ``model`` (a LangChain chat model, a model name,
    ``"local"`` or None), ``include_reason``, ``strict_mode`` (score becomes 1 or 0, threshold 1), ``async_mode``,
    ``verbose_mode`` (verdicts to ``verbose_logs`` and the ``contextjudge`` logger), ``evaluation_template``.
    ``llm_reason=True`` asks the judge for a written summary (one extra call); by default the reason is composed
    from the verdicts for free. ``judge_options`` tunes retries, timeouts, concurrency and request size.
    ``judge_supports_images`` says whether the judge can be sent images (None: decided by
    ``contextjudge.multimodal.judge_supports_images``); a case with images and a text-only judge is refused before
    any call.
    """

    name: ClassVar[str] = "Metric"
    key: ClassVar[str] = "metric"
    default_template: ClassVar[Any] = None
    required_params: ClassVar[tuple[str, ...]] = ()
    conversational: ClassVar[bool] = False
    # True when the verdicts are one per retrieved node (in rank order); recorded in each result's details under
    # PER_NODE, so that the report, which sees results and not classes, lays them out per node
    judges_nodes: ClassVar[bool] = False
    # False for the ranking metrics, which score from labels and never resolve or call a judge
    needs_judge: ClassVar[bool] = True
    # The verdict family it asks the judge for, by name (``judges.families()``: "node_usefulness",
    # "statement_support", "sentence_relevance", "answer_relevance", "rubric_recall"); None for a metric that asks no
    # judge. With ``reference_kind`` it gives the calibration key of its verdicts (``calibration_key``), which
    # ``not_gated`` reads (a family the judge is not trusted for does not gate) and calibration groups verdicts by.
    family: ClassVar[str | None] = None
    # what its verdicts are judged against: "expected_output", "actual_output" (the app's own answer: utilization and
    # faithfulness have calibration keys of their own), "expected_outcome"; None: the input alone
    reference_kind: ClassVar[str | None] = None
    # The gold label field (``cases.labels.LABEL_FIELDS``) whose labels are this metric's verdicts done by a person:
    # the gold score (``score_labels`` of them), ``contextjudge calibrate`` and the bias-corrected means read it.
    # None: no gold form.
    label_field: ClassVar[str | None] = None
    # True: gates whatever the judge (the embedded judge agrees with people on it out of the box); False: gates only
    # where the judge is trusted for its ``calibration_key()`` (``not_gated``)
    always_gated: ClassVar[bool] = True
    # other names the command line (``--metrics``) accepts for this metric's key
    aliases: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        threshold: float = 0.5,
        model: Any = None,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        evaluation_template: Any = None,
        *,
        llm_reason: bool = False,
        judge_options: JudgeOptions | None = None,
        judge_supports_images: bool | None = None,
    ) -> None:
        if not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
            raise ConfigurationError(f"{self.name}: threshold must be a number between 0 and 1, got {threshold!r}. "
                                     "Pass e.g. threshold=0.5.")
        self.threshold = 1.0 if strict_mode else float(threshold)
        self._model_arg = model
        self._model = None
        self.include_reason = include_reason
        self.strict_mode = strict_mode
        self.async_mode = async_mode
        self.verbose_mode = verbose_mode
        self.evaluation_template = evaluation_template or self.default_template
        self.llm_reason = llm_reason
        self.judge_options = judge_options
        self.judge_supports_images = judge_supports_images
        # last result of measure(), for standalone use only
        self.score: float | None = None
        self.reason: str | None = None
        self.success: bool | None = None
        self.verdicts: list[dict[str, Any]] = []
        self.error: str | None = None
        self.verbose_logs: str | None = None
        self.evaluation_cost: float | None = None
        self.last_result: MetricResult | None = None

    # ------------------------------------------------------------------------------------------ config
    @property
    def model(self):
        """The resolved judge chat model (resolved on first use, so constructing a metric is cheap)."""
        if self._model is None:
            self._model = resolve_model(self._model_arg)
            if self._model_arg is None:
                _announce_default_judge(self._model)
        return self._model

    @property
    def evaluation_model(self) -> str:
        return judge_name(self._judge_model())

    def _judge_model(self) -> Any:
        """The judge this metric uses now: its own model, or the current run's default when it was built without."""
        ctx = current_run_context()
        return ctx.judge_for(self) if ctx is not None else self.model

    @property
    def __name__(self) -> str:  # DeepEval users read metric.__name__
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold}, model={self._model_arg!r})"

    # ------------------------------------------------------------------------------------------ checks
    def check(self, test_case: Any) -> None:
        """Raise ``MissingTestCaseParamsError`` (or ``InvalidTestCaseError``) when ``test_case`` cannot be scored."""
        want = ConversationalTestCase if self.conversational else LLMTestCase
        if not isinstance(test_case, want):
            raise InvalidTestCaseError(
                f"{self.name} scores {want.__name__} objects, got {type(test_case).__name__}. "
                + ("Use a Turn* metric for conversations." if isinstance(test_case, ConversationalTestCase)
                   else "Use the single-turn metric for LLMTestCase." if self.conversational else ""),
                field="test_case")
        missing = [f for f in self.required_params if _is_missing(getattr(test_case, f, None))]
        if missing:
            raise MissingTestCaseParamsError(self.name, missing)

    # ------------------------------------------------------------------------------------------ scoring
    async def compute(self, test_case: Any, judge: JudgeClient) -> Outcome:
        """What this metric computes for one ``test_case``: override it to write a metric of your own
        (docs/custom-metrics.md). ``test_case`` has passed ``check`` (``required_params``); ``judge`` asks the
        judge (``judge.ask(request, judge.template.generate_verdicts)``) with its cache, retries, budgets and
        limits. Return an ``Outcome`` (score in [0, 1], verdicts, reason); ``a_score`` / ``measure`` apply strict
        mode, the threshold and the reason settings. A judge failure raised here (``JudgeError``) becomes a result
        with ``error`` set, never a score.

        The default calls ``_compute``, the override point of earlier releases, which keeps working."""
        return await self._compute(test_case, judge)

    async def _compute(self, test_case: Any, client: JudgeClient) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} computes nothing: override compute(test_case, judge) "
                                  "(docs/custom-metrics.md).")

    @classmethod
    def calibration_key(cls) -> str | None:
        """The key its verdicts have in calibration files, trusted families and calibration reports
        (``VerdictFamily.calibration_key`` of its ``family`` and ``reference_kind``: "node_usefulness.actual_output"
        for context utilization); None without a family."""
        if cls.family is None:
            return None
        return judge_family(cls.family).calibration_key(cls.reference_kind)

    @classmethod
    def score_labels(cls, labels: list[bool]) -> float:
        """The score this metric gives when its verdicts are ``labels`` (yes/no, one per judged item, in the order
        it judges them: nodes in rank order, sentences, statements): the formula its judged score and its gold score
        share. The default is the share of yes; the precision-style metrics weigh by rank
        (``weighted_cumulative_precision``)."""
        return fraction(labels)

    def _context(self) -> RunContext:
        ctx = current_run_context()
        if ctx is None:
            ctx = RunContext(options=self.judge_options or RunContext().options)
        return ctx

    def _check_images(self, found: list[tuple[str, str, Any]]) -> bool:
        """True when this metric will send images; raises when its judge cannot take them (before any call)."""
        used = {"input", "retrieval_context", "context", *self.required_params}
        relevant = [(where, img) for field, where, img in found if self.conversational or field in used]
        if not relevant:
            return False
        model = self._judge_model()
        if judge_supports_images(model, self.judge_supports_images):
            return True
        spots = sorted(dict.fromkeys(where for where, _ in relevant), key=lambda w: "retrieval_context" not in w)
        shown = ", ".join(spots[:3]) + (f" and {len(spots) - 3} more places" if len(spots) > 3 else "")
        raise JudgeUnavailableError(
            f"{self.name}: the judge {judge_name(model)!r} cannot take images, but this case has images in "
            f"{shown}. Use a vision-capable judge (for example model='gpt-4.1-mini'), pass "
            "judge_supports_images=True to the metric if this judge can read images, or use model='local', which "
            "judges the text and alt text around images.")

    async def _run(self, test_case: Any) -> MetricResult:
        self.check(test_case)
        view, found = judge_view(test_case)
        ctx = self._context()
        client: Any = JudgeClient(ctx.judge_for(self), self.evaluation_template, ctx, options=self.judge_options)
        if found and self._check_images(found):
            client = ImageRequests(client)
        outcome = await self.compute(view, client)
        return await self._finish(outcome, client)

    async def _finish(self, outcome: Outcome, client: JudgeClient) -> MetricResult:
        score = float(outcome.score)
        if self.strict_mode:
            score = 1.0 if score >= 1.0 - 1e-9 else 0.0
        reason: str | None = outcome.reason if self.include_reason else None
        if self.include_reason and self.llm_reason and outcome.judged:
            reason = await self._llm_reason(client, score, outcome)
        verbose = None
        if self.verbose_mode:
            verbose = "Verdicts:\n" + json.dumps(outcome.verdicts, indent=2, default=str)
            logger.info("contextjudge %s: score=%.4f\n%s", self.name, score, verbose)
        details = {**outcome.details, PER_NODE: True} if self.judges_nodes else dict(outcome.details)
        # what changes the judge's answers (model, parameters, calibration thresholds): `contextjudge trend` tells a
        # changed judge from a changed retriever by it
        details[JUDGE_IDENTITY] = _judge_fingerprint(client.identity, getattr(self, "evaluation_template", None))
        return MetricResult(
            name=self.name, score=score, threshold=self.threshold, success=score >= self.threshold,
            reason=reason, strict_mode=self.strict_mode, verdicts=outcome.verdicts, verbose_logs=verbose,
            usage=outcome.usage, evaluation_model=client.name,
            details=details,
            score_spread=self._spread(outcome.repeat_scores),
        )

    def _spread(self, scores: list[float] | None) -> float | None:
        """The variance (k - 1 in the denominator) of the case's score across judge repeats, strict mode applied."""
        if not scores or len(scores) < 2:
            return None
        if self.strict_mode:
            scores = [1.0 if x >= 1.0 - 1e-9 else 0.0 for x in scores]
        return float(statistics.variance(scores))

    async def _llm_reason(self, client: JudgeClient, score: float, outcome: Outcome) -> str:
        try:
            text, usage = await client.complete_text(
                self.evaluation_template.generate_reason(self.name, score, outcome.reason))
            outcome.usage.add(usage)
        except JudgeError as exc:
            logger.warning("contextjudge: the LLM-written reason failed (%s); keeping the composed reason", exc)
            return outcome.reason
        for cand in reversed(extract_json_candidates(text)):
            if isinstance(cand, dict) and isinstance(cand.get("reason"), str):
                return cand["reason"]
        return text.strip() or outcome.reason

    async def a_score(self, test_case: Any) -> MetricResult:
        """Score ``test_case`` and return a ``MetricResult``; keeps no state on the metric.

        Judge failures come back as a result with ``error`` set and ``score`` None. A test case the metric cannot
        score raises ``MissingTestCaseParamsError`` / ``InvalidTestCaseError``.
        """
        try:
            return await self._run(test_case)
        except JudgeError as exc:
            return MetricResult(name=self.name, score=None, threshold=self.threshold, success=False,
                                strict_mode=self.strict_mode, error=str(exc), error_type=type(exc).__name__,
                                evaluation_model=_safe_name(self))

    def _apply(self, result: MetricResult) -> None:
        self.last_result = result
        self.score = result.score
        self.reason = result.reason
        self.success = result.success
        self.verdicts = result.verdicts
        self.error = result.error
        self.verbose_logs = result.verbose_logs
        self.evaluation_cost = result.usage.cost

    async def a_measure(self, test_case: Any, *_: Any, **__: Any) -> float | None:
        """Score ``test_case``, keep the result on the metric and return the score. Raises on failure."""
        try:
            result = await self._run(test_case)
        except ContextJudgeError as exc:
            self.score, self.reason, self.success, self.verdicts, self.error = None, None, False, [], str(exc)
            raise
        self._apply(result)
        return result.score

    def measure(self, test_case: Any, *_: Any, **__: Any) -> float | None:
        """Sync form of ``a_measure``; works inside a running event loop too."""
        return run_sync(self.a_measure(test_case))

    def is_successful(self) -> bool:
        return bool(self.success) and self.error is None


def _safe_name(metric: BaseMetric) -> str | None:
    try:
        return metric.evaluation_model
    except Exception:  # noqa: BLE001
        return None


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return False
