"""The metrics: the context metrics, faithfulness and answer relevancy (judged), and the ranking metrics (no judge). Every metric takes DeepEval's parameters and has ``measure``, ``a_measure`` and ``a_score``.

``BY_KEY`` names each metric class by its short key (``"contextual_precision"``): the registry (``_registry``), which
``register_metric`` adds your own metric to (docs/custom-metrics.md); every table of label fields, verdict families
and gates is read from what the registered classes declare. ``from_keys`` builds metric objects from keys, the one
way the CLI, the worker and ``estimate`` do it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..judges import (
    AnswerRelevancyTemplate,
    ContextualPrecisionTemplate,
    ContextualRecallTemplate,
    ContextualRelevancyTemplate,
    ContextUtilizationTemplate,
    FaithfulnessTemplate,
    RubricContextRecallTemplate,
    TurnContextualPrecisionTemplate,
    TurnContextualRecallTemplate,
    TurnContextualRelevancyTemplate,
)
from ._base import BaseMetric, Outcome, node_items  # node_items: for the core's calibration, not in __all__
from ._defaults import (
    TRUST_KAPPA,
    carried,
    default_metric_keys,
    default_metrics_for,
    not_gated,
    trusted_families,
)
from ._formulas import fraction, weighted_cumulative_precision

# the score a case's gold labels imply: for the core's engine, report and CLI, not in __all__
from ._gold import fill_gold_scores, gold_score, gold_score_of, gold_statements, label_problems
from ._ranking import (
    HitRateMetric,
    MAPMetric,
    MRRMetric,
    NDCGMetric,
    PrecisionAtKMetric,
    RankedPrecisionMetric,
    RankingMetric,
    RecallAtKMetric,
    ranked_relevance,  # for the report's regression check, not in __all__
)
from ._registry import (
    ALWAYS_GATED,
    BY_KEY,
    FAMILY_OF_KEY,
    JUDGE_FREE,
    metric_aliases,
    metric_class,
    metrics_of_field,
    register_metric,
    registered_metrics,
    unregister_metric,
)
from ._single import (
    AnswerRelevancyMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    FaithfulnessMetric,
    RubricContextRecallMetric,
)
from ._turn import TurnContextualPrecisionMetric, TurnContextualRecallMetric, TurnContextualRelevancyMetric

__all__ = [
    "ALWAYS_GATED",
    "FAMILY_OF_KEY",
    "TRUST_KAPPA",
    "AnswerRelevancyMetric",
    "AnswerRelevancyTemplate",
    "BaseMetric",
    "ContextUtilizationMetric",
    "ContextUtilizationTemplate",
    "ContextualPrecisionMetric",
    "ContextualPrecisionTemplate",
    "ContextualRecallMetric",
    "ContextualRecallTemplate",
    "ContextualRelevancyMetric",
    "ContextualRelevancyTemplate",
    "FaithfulnessMetric",
    "FaithfulnessTemplate",
    "HitRateMetric",
    "MAPMetric",
    "MRRMetric",
    "NDCGMetric",
    "Outcome",
    "PrecisionAtKMetric",
    "RankedPrecisionMetric",
    "RankingMetric",
    "RecallAtKMetric",
    "RubricContextRecallMetric",
    "RubricContextRecallTemplate",
    "TurnContextualPrecisionMetric",
    "TurnContextualPrecisionTemplate",
    "TurnContextualRecallMetric",
    "TurnContextualRecallTemplate",
    "TurnContextualRelevancyMetric",
    "TurnContextualRelevancyTemplate",
    "default_metric_keys",
    "default_metrics",
    "default_metrics_for",
    "fraction",
    "from_keys",
    "known_key",
    "metric_aliases",
    "metric_class",
    "metric_keys",
    "metrics_of_field",
    "not_gated",
    "register_metric",
    "registered_metrics",
    "trusted_families",
    "unregister_metric",
    "weighted_cumulative_precision",
]


def _known_key(key: str) -> str:
    """``key`` as ``BY_KEY`` spells it (any case, ``-`` for ``_``; a ranking metric's cut-off kept: ``"ndcg@5"``), or
    ``ConfigurationError`` naming the known keys."""
    from ..errors import ConfigurationError  # noqa: PLC0415

    norm = str(key).strip().lower().replace("-", "_") if isinstance(key, str) else None
    base, at, k = (norm or "").partition("@")
    if norm is None or base not in BY_KEY:
        raise ConfigurationError(f"unknown metric {key!r}: choose from {', '.join(sorted(BY_KEY))} (a ranking "
                                 f"metric may name its cut-off: ndcg@5).")
    if at and (base not in JUDGE_FREE or not k.isdigit() or int(k) < 1):
        raise ConfigurationError(f"metric {key!r}: only the ranking metrics ({', '.join(sorted(JUDGE_FREE))}) take "
                                 "a cut-off, written @k with k a whole number >= 1 (ndcg@5).")
    return norm


known_key = _known_key  # a metric key as from_keys reads it ("NDCG@5" -> "ndcg@5"); the CLI checks keys with it


def metric_keys(names: Iterable[str] | None, default: Iterable[str] = ()) -> list[str]:
    """The registered keys ``names`` mean, in order and once each: each name may be a key (any case, ``-`` for
    ``_``), an alias a metric declares (``"precision"``, ``"groundedness"``), its class name or its shown name
    ("Contextual Precision"), a ranking metric with its cut-off (``"ndcg@5"``), or several of these joined by
    commas (``"precision,recall"``). No names (None, or only blanks): ``default``. What the CLI's ``--metrics`` and
    the MCP tools' ``metrics`` read; an unknown name raises ``ConfigurationError`` naming the known ones.

        metric_keys(["precision,ndcg@5"]) == ["contextual_precision", "ndcg@5"]
    """
    from ..errors import ConfigurationError  # noqa: PLC0415

    aliases = metric_aliases()  # what each metric declares (``BaseMetric.aliases``)
    by_class = {cls.__qualname__.lower(): key for key, cls in BY_KEY.items()}
    by_name = {str(cls.name).lower(): key for key, cls in BY_KEY.items()}
    if isinstance(names, str):
        names = [names]
    raw = [p.strip() for v in (names or []) for p in v.split(",") if p.strip()] or list(default)
    keys: list[str] = []
    for item in raw:
        low = item.lower().replace("-", "_")
        cut = ""
        if "@" in low and low not in aliases and low.rpartition("@")[2].isdigit():  # ndcg@5: a cut-off
            low, _, k = low.rpartition("@")
            cut = f"@{k}"
        key = low if low in BY_KEY else aliases.get(low) or by_class.get(low) or by_name.get(item.lower())
        if key is None:
            raise ConfigurationError(f"unknown metric {item!r}. Choose from: {', '.join(sorted(BY_KEY))} "
                                     f"(or {', '.join(sorted(aliases))}; a ranking metric may name its cut-off, "
                                     "ndcg@5).")
        if cut:
            key = _known_key(key + cut)
        if key not in keys:
            keys.append(key)
    return keys


def from_keys(keys: Iterable[str], *, model: Any = None, thresholds: float | Mapping[str, float | None] | None = None,
              options: Mapping[str, Mapping[str, Any]] | None = None) -> list[BaseMetric]:
    """One metric object per key of ``keys`` (``BY_KEY``'s: ``"contextual_precision"``, ``"context_utilization"``,
    ``"turn_contextual_relevancy"``...; any case, ``-`` for ``_``), in order.

    ``model``: the judge of every metric (None: the run's judge, or the default one). ``thresholds``: one threshold
    for every metric, or per key (a key left out, or given None, keeps the metric's own, 0.5). ``options``: other
    constructor arguments per key, e.g. ``{"contextual_recall": {"strict_mode": True}}``. A ranking metric's key may
    carry its cut-off: ``"ndcg@5"``, ``"hit_rate@3"`` (the same as ``options={"ndcg": {"k": 5}}``). An unknown key, in
    ``keys``, ``thresholds`` or ``options``, raises ``ConfigurationError`` naming the known keys.

        from_keys(["contextual_precision", "contextual_recall"], model="local", thresholds={"contextual_recall": 0.7})
    """
    if isinstance(keys, str):
        keys = [keys]
    per: dict[str, float | None]
    if thresholds is None or isinstance(thresholds, (int, float)):
        per = {}
        every = None if thresholds is None else float(thresholds)
    else:
        per = {_known_key(k): v for k, v in thresholds.items()}
        every = None
    extra = {_known_key(k): dict(v) for k, v in (options or {}).items()}
    out: list[BaseMetric] = []
    for key in keys:
        key = _known_key(key)
        base, _, k = key.partition("@")
        kw: dict[str, Any] = {**extra.get(base, {}), **extra.get(key, {}), "model": model}
        if k:
            kw["k"] = int(k)
        t = per.get(key, per.get(base, every))
        if t is not None:
            kw["threshold"] = float(t)
        out.append(BY_KEY[base](**kw))
    return out


def default_metrics(model: Any = None, *, goldens: Iterable[Any] = (), expected_output: bool | None = None,
                    conversations: bool = True) -> list[Any]:
    """The metric objects capture uses when none are given (``default_metrics_for`` the goldens; no goldens: only
    those that need nothing but the app's run)."""
    found = carried(goldens)
    if expected_output is not None:
        found["expected_output"] = expected_output
    return from_keys(default_metric_keys(**found, conversations=conversations), model=model)
