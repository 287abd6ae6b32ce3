"""The judge a command means (issue 49: front doors hold no domain work): ``--model`` / a tool's ``judge`` read as a
judge, with the one line that says which judge that is and, for the default, why; and the store's labels applied
to it. The CLI and the MCP tools print or return these lines; Python callers get the same judge.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store import CalibrationStore

__all__ = ["choose_judge", "judge_on_store"]


def choose_judge(model: str | None) -> tuple[Any, str]:
    """The judge ``model`` names (``judges.resolve_model``'s spellings, and ``"fake"``: the scripted ``FakeJudge``)
    and one line saying which it is, what it costs and, when ``model`` is empty, why it is the default:
    ``"judge: local-e5, the embedded offline judge (free, no API calls) (no --model ...)"``. A judge that cannot be
    built raises ``JudgeUnavailableError`` saying why."""
    from .._result import is_embedded_judge  # noqa: PLC0415
    from ..judges import judge_name, resolve_model  # noqa: PLC0415

    if model and model.strip().lower() == "fake":
        from ..testing import FakeJudge  # noqa: PLC0415

        return FakeJudge(), "judge: FakeJudge, the scripted test double (scores show the plumbing, not quality)"
    judge = resolve_model(model)
    name = judge_name(judge)
    if is_embedded_judge(name):
        what = "the embedded offline judge (free, no API calls)"
    else:
        what = "an LLM judge (billed by its provider)"
    why = "" if model else (" (no --model: $CONTEXTJUDGE_MODEL" if os.environ.get("CONTEXTJUDGE_MODEL") else
                            " (no --model or $CONTEXTJUDGE_MODEL: OPENAI_API_KEY is set" if
                            os.environ.get("OPENAI_API_KEY") else
                            " (no --model, $CONTEXTJUDGE_MODEL or OPENAI_API_KEY") + "; pass --model to choose)"
    return judge, f"judge: {name}, {what}{why}"


def judge_on_store(store: CalibrationStore | None, judge: Any) -> tuple[Any, list[str]]:
    """The judge a command on ``store`` uses: the embedded judge calibrated on the store's labels when it has any
    (``store_calibrated``), with one line per calibrated family (or one saying the fit kept the shipped weights);
    any other judge as it is, with no line."""
    if store is None:
        return judge, []
    from ..judges import judge_name  # noqa: PLC0415
    from ._store_calibration import store_calibrated  # noqa: PLC0415

    got, kept = store_calibrated(store, judge)
    if kept is None:
        return judge, []
    if kept.get("summary"):
        return got, [f"judge: {judge_name(got)}, {fam} {words}" for fam, words in kept["summary"].items()]
    return got, [f"judge: {judge_name(got)} keeps its own weights: a fit on the store's {kept.get('cases')} "
                 "labelled case(s) did not beat them on cases it was not fitted on (label more)"]
