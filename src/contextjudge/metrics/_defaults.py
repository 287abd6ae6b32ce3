"""The default metrics, from what the test cases carry, and which of them gate: the one definition every door uses
(capture, the worker, ``contextjudge eval`` / ``score`` / ``estimate``, the MCP tools).

- expected ids (or expected texts): the judge-free ranking metrics (hit rate, MRR, recall, NDCG), exact, gated;
- an expected output: contextual precision and recall, gated (the embedded judge agrees with users on node
  usefulness at kappa 0.82-0.87);
- always: contextual relevancy and, with the app's answer, context utilization and faithfulness: computed and shown,
  gated only where the judge is trusted for their verdict family (``trusted_families``): an LLM judge, or the
  embedded judge calibrated on the user's labels with a cross-validated kappa of at least ``TRUST_KAPPA`` for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._registry import ALWAYS_GATED, FAMILY_OF_KEY

__all__ = ["ALWAYS_GATED", "FAMILY_OF_KEY", "RANKING_DEFAULT", "TRUST_KAPPA", "carried", "default_metric_keys",
           "default_metrics_for", "not_gated", "trusted_families"]

TRUST_KAPPA = 0.6  # "substantial" agreement (Landis and Koch): the bar a family's verdicts must clear to gate on
RANKING_DEFAULT = ("hit_rate", "mrr", "recall_at_k", "ndcg")
WITH_REFERENCE = ("contextual_precision", "contextual_recall")
# FAMILY_OF_KEY (metric key -> verdict family) and ALWAYS_GATED (the judged metrics that gate whatever the judge) are
# read from what each metric declares (``family``, ``always_gated``): see ``_registry``


def default_metric_keys(*, expected_ids: bool = False, expected_output: bool = False, actual_output: bool = True,
                        conversations: bool = False) -> list[str]:
    """The default metric keys for cases that carry expected ids or texts (``expected_ids``), an expected output,
    the app's answer (``actual_output``), and may be conversations (turn relevancy)."""
    keys = [*(RANKING_DEFAULT if expected_ids else ()), *(WITH_REFERENCE if expected_output else ()),
            "contextual_relevancy"]
    if actual_output:
        keys += ["context_utilization", "faithfulness"]
    if conversations:
        keys.append("turn_contextual_relevancy")
    return keys


def carried(items: Iterable[Any]) -> dict[str, bool]:
    """Whether any of ``items`` (goldens or test cases) carries expected ids or texts, and an expected output."""
    ids = out = False
    for it in items:
        ids = ids or getattr(it, "expected_context_ids", None) is not None or bool(getattr(it, "context", None))
        out = out or bool(getattr(it, "expected_output", None))
        if ids and out:
            break
    return {"expected_ids": ids, "expected_output": out}


def default_metrics_for(items: Iterable[Any], *, actual_output: bool | None = True,
                        conversations: bool | None = False) -> list[str]:
    """``default_metric_keys`` for what ``items`` (goldens or test cases) carry: the ranking metrics when any has
    expected ids or texts, precision and recall when any has an expected output. ``actual_output`` and
    ``conversations`` None: read from ``items`` too (cases already made, such as a stored run's: whether any has the
    app's answer, whether any is a conversation); goldens, whose answers the app has yet to give, leave them as
    given."""
    items = list(items)
    if actual_output is None:
        actual_output = any(getattr(it, "actual_output", None) for it in items)
    if conversations is None:
        conversations = any(getattr(it, "turns", None) for it in items)
    return default_metric_keys(**carried(items), actual_output=actual_output, conversations=conversations)


def trusted_families(judge: Any) -> frozenset[str] | None:
    """The verdict families whose verdicts a gate may rest on, for ``judge``: None (every family) for an LLM judge
    (and a scripted test double); for the embedded judge, those its calibration file (``CalibratedJudge``) fitted
    with a cross-validated kappa of at least ``TRUST_KAPPA``; none for the bare embedded judge."""
    from .._result import is_embedded_judge  # noqa: PLC0415
    from ..judges import judge_name  # noqa: PLC0415

    if judge is None:
        return frozenset()  # the default judge is resolved later; only the exact metrics are known to be sound
    if isinstance(judge, str):
        from ..judges import local_spec  # noqa: PLC0415

        try:
            embedded = local_spec(judge) is not None
        except Exception:  # noqa: BLE001 - a spec local_spec does not read is not the embedded judge
            embedded = False
        return frozenset() if embedded or judge.strip().startswith("@") else None
    try:
        name = judge_name(judge)
    except Exception:  # noqa: BLE001
        name = ""
    if not is_embedded_judge(name):
        return None
    calibration = getattr(judge, "calibration", None)
    fitted = getattr(calibration, "fitted", None) or {}
    out = set()
    for fam, fit in fitted.items():
        # the kappa the calibrated judge has on labels it was not fitted on: kappa_cv (issue 47's files: the fit's
        # when one was kept, else the judge's own), kappa_after_cv in files written before it
        cv = fit.get("kappa_cv", fit.get("kappa_after_cv")) if isinstance(fit, dict) else None
        if isinstance(cv, (int, float)) and cv >= TRUST_KAPPA:
            out.add(fam)
    return frozenset(out)


def not_gated(keys: Iterable[str], judge: Any, *, explicit: Iterable[str] = ()) -> dict[str, str]:
    """Per metric key of ``keys`` that is shown but does not gate, why (a phrase); ``explicit``: keys the user gave a
    threshold of their own (``--threshold NAME=X``), which always gate."""
    trusted = trusted_families(judge)
    given = set(explicit)
    out: dict[str, str] = {}
    for key in keys:
        base = key.partition("@")[0]
        fam = FAMILY_OF_KEY.get(base)
        if key in given or base in given or fam is None or base in ALWAYS_GATED or trusted is None or fam in trusted:
            continue
        out[key] = fam
    return out
