"""A store's labels calibrate the embedded judge for that store (issue 47), with no ``model="@file"`` step.

``store_calibrated(store, judge)``: when ``judge`` is the bare embedded judge and the store holds labelled cases, the
judge fitted on them (``acalibrate``: its own weights, shrunk toward the shipped ones, kept per family only where they
beat them out of sample). The fit is kept in the store (``cj_meta``, one row per embedded judge) with a fingerprint of
the labels and the judge's identity, so it is redone only when a label (or the judge) changed. The calibrated judge's
identity carries the fit's hash (``Calibration.fingerprint``), so its verdicts never mix with the bare judge's in the
verdict cache or in ``trend``. A judge given as a calibration file (``model="@file"``), an LLM judge, or a store
without labels is returned as it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from .._result import embedded_spec, is_embedded_judge
from ..cases.labels import labels_of
from ..judges import FAMILIES, CalibratedJudge, Calibration, calibrated, judge_identity, judge_name

if TYPE_CHECKING:
    from ..store import CalibrationStore

__all__ = ["calibrates", "keep_store_calibration", "labels_fingerprint", "store_calibrated"]

logger = logging.getLogger("contextjudge")

# the fits this process made lately, by (judge, fingerprint of the labels): a read-only store (an MCP server's, a CI
# artifact) cannot keep its fit, and is not fitted again for each command of the process
_RECENT: dict[tuple[str, str], dict[str, Any]] = {}
FORMAT = 2  # 2: the label memory, and a measured-only calibration where no fit was kept


def _bare_embedded(judge: Any) -> bool:
    return (not isinstance(judge, CalibratedJudge) and is_embedded_judge(judge_name(judge))
            and callable(getattr(judge, "learn", None)) and not getattr(judge, "learned", None))


def calibrates(judge: Any) -> bool:
    """Whether ``store_calibrated`` calibrates ``judge`` on a store that holds labels: the bare embedded judge (not one
    given as a calibration file, not an LLM judge)."""
    return _bare_embedded(judge)


def _spec(judge: Any) -> str:
    return embedded_spec(judge_name(judge))


def labels_fingerprint(cases: list[Any], judge: Any) -> str:
    """What a calibration on ``cases`` depends on: each labelled case's question, references, nodes and labels, and
    the judge's identity."""
    rows = sorted(json.dumps([tc.input, tc.expected_output, tc.actual_output,
                              [getattr(n, "text", str(n)) for n in tc.retrieval_context or []], labels_of(tc)],
                             sort_keys=True, default=str) for tc in cases)
    h = hashlib.sha256(judge_identity(judge).encode())
    for r in rows:
        h.update(r.encode())
    return h.hexdigest()[:24]


def store_calibrated(store: CalibrationStore | None, judge: Any, *,
                     refit: bool = False) -> tuple[Any, dict[str, Any] | None]:
    """``judge`` calibrated on ``store``'s labels, and what the store keeps of the fit (``fingerprint``, ``cases``,
    ``calibration``: the file's contents; where no family beat the shipped weights, one that changes no verdict and
    carries the kappa the labels measured for the families with kappa_cv >= TRUST_KAPPA (so a gate may trust them),
    or None when none has; ``summary``: family -> "calibrated on N of your labels; kappa X [CI] cross-validated");
    ``(judge, None)`` when it does not apply.
    ``refit``: fit again even when the kept fit is current. A store that cannot be written (read-only) still gets
    the fit, redone each time."""
    if store is None or not _bare_embedded(judge):
        return judge, None
    try:
        cases = store.labelled_cases()
    except Exception as exc:  # noqa: BLE001 - a store that cannot say falls back to the bare judge, said once
        logger.warning("contextjudge: the store's labels could not be read (%s); the embedded judge is not "
                       "calibrated on them.", exc)
        return judge, None
    if not cases:
        return judge, None
    spec = _spec(judge)
    fp = labels_fingerprint(cases, judge)
    kept = None if refit else store.stored_calibration(spec)
    if not (isinstance(kept, dict) and kept.get("format") == FORMAT and kept.get("fingerprint") == fp):
        kept = None if refit else _RECENT.get((spec, fp))
        if kept is None:
            kept = _RECENT[(spec, fp)] = _fit(cases, judge, spec, fp, store)
            while len(_RECENT) > 8:
                _RECENT.pop(next(iter(_RECENT)))
        try:
            store.keep_calibration(spec, kept)
        except Exception as exc:  # noqa: BLE001 - a read-only store: the fit is used, not kept
            logger.info("contextjudge: the calibration on the store's labels could not be kept in it (%s).", exc)
    cal = kept.get("calibration")
    if not cal:
        return judge, kept
    return calibrated(judge, Calibration.from_dict(cal, "the store's calibration")), kept


def _fit(cases: list[Any], judge: Any, spec: str, fp: str, store: CalibrationStore | None = None) -> dict[str, Any]:
    from .._aio import run_sync  # noqa: PLC0415
    from ._calibrate import acalibrate  # noqa: PLC0415
    from ._judged import kept_verdicts  # noqa: PLC0415

    # what the judge said of each labelled case is kept in the store: a fit after a new label judges that case only
    return _kept_of(run_sync(acalibrate(cases, judge, judge_spec=spec, resamples=1000,
                                        verdicts=kept_verdicts(store))), spec, fp)


def _kept_of(report: dict[str, Any], spec: str, fp: str) -> dict[str, Any]:
    from ._calibrate import calibration_of  # noqa: PLC0415

    cal = calibration_of(report)
    fams: dict[str, dict[str, Any]] = {f: report[f] for f in FAMILIES if f in report}
    if cal is None:
        cal = _measured(report, fams)
    return {"format": FORMAT, "fingerprint": fp, "judge": spec, "cases": report["cases"],
            "calibration": cal.to_dict() if cal is not None else None,
            "summary": cal.summary() if cal is not None else {},
            "families": {f: {"items": r.get("items"), "kappa": r.get("kappa"), "kappa_cv": r.get("kappa_cv"),
                             "kappa_cv_ci": r.get("kappa_cv_ci"), "fitted": bool(r["threshold"].get("fitted")),
                             "why": r["threshold"].get("why")} for f, r in fams.items()}}


def _measured(report: dict[str, Any], fams: dict[str, dict[str, Any]]) -> Calibration | None:
    """Where no family's fit beat the shipped weights: a calibration that changes no verdict and carries what the
    store's labels measured of the judge as shipped (its kappa on them, cross-validated in the sense that nothing was
    fitted), for the families agreeing well enough to gate on (``metrics.trusted_families``); None when none does."""
    from ..metrics import TRUST_KAPPA  # noqa: PLC0415

    trusted = {f: r for f, r in fams.items()
               if isinstance(r.get("kappa_cv"), (int, float)) and r["kappa_cv"] >= TRUST_KAPPA}
    if not trusted:
        return None
    fitted = {f: {k: v for k, v in r["threshold"].items() if k not in ("fitted", "weights", "memory")}
              for f, r in trusted.items()}
    return Calibration(judge=report["judge_spec"], judge_name=report["judge"].removesuffix("+calibrated"),
                       judge_identity=report["judge_identity"], fitted=fitted)


def keep_store_calibration(store: CalibrationStore, judge: Any, cases: list[Any], report: dict[str, Any]) -> bool:
    """Keep ``report`` (``acalibrate`` of the bare embedded ``judge`` on all of ``store``'s labelled ``cases``) as the
    store's calibration, which later commands on the store use; False when it does not apply or cannot be kept."""
    if not _bare_embedded(judge):
        return False
    spec = _spec(judge)
    try:
        store.keep_calibration(spec, _kept_of(report, spec, labels_fingerprint(cases, judge)))
    except Exception as exc:  # noqa: BLE001 - a read-only store
        logger.info("contextjudge: the calibration could not be kept in the store (%s).", exc)
        return False
    return True
