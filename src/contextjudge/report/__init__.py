"""The HTML report of a run, optionally compared with another: one self-contained file that loads nothing.

    from contextjudge.report import write_report
    write_report("report.html", result)                                  # an EvaluationResult
    write_report("report.html", store="results.db", run="latest", compare="nightly-41")

Per metric: the score distribution (inline SVG), the mean and the pass rate each with a 95% interval over cases
(``contextjudge.stats``), the bias-corrected mean when some cases carry gold labels, and the
errors (with a table of the errors by metric and kind). The cases: a table with each metric's cell coloured by its
own result, which the page's one inline script filters (failing, errors, passing, changed), sorts by any metric
(worst first) and searches by text; with scripts off every case is still listed. Per case: the input, output and
expected output, an agent's tool call (tool, query, the tool's own answer), the app's or a metric's error, the ranked
nodes with each per-node metric's verdict and reasons, recall's unsupported statements, and the retriever's own
ranking against the final one when a reranker or postprocessors changed it. Compared with a baseline run: the paired
difference per metric with its interval, the cases that changed most, and for a changed case the baseline's ranked
nodes beside this run's. Runs are shown by name and id. ``render_calibration`` renders a calibration report
(``contextjudge calibrate --report``): confusion counts per verdict family and the items judge and labels disagree on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._result import EvaluationResult
from ..errors import ConfigurationTypeError
from ..metrics import fill_gold_scores
from ._bounded import DEFAULT_MAX_CASES
from ._calibration import render_calibration
from ._format import different_goldens, different_goldens_note, goldens_words, refuse_different_goldens
from ._html import MetricChange, RunView, compare_runs, render_html
from ._label_page import render_label_page
from ._regression import Regression, find_regression, not_gated_names, stored_regression
from ._script import CSP
from ._stats import Interval, bootstrap_mean, paired_difference
from ._trend import render_trend

if TYPE_CHECKING:
    from ..store import ResultsStore

    StoreRef = ResultsStore | str | os.PathLike[str]
    """A results store, or the path or URL that opens one."""

__all__ = ["Interval", "MetricChange", "Regression", "RunView", "bootstrap_mean", "compare_runs",
           "different_goldens", "different_goldens_note", "find_regression", "goldens_words",
           "is_report_file", "not_gated_names", "paired_difference", "refuse_different_goldens", "render_calibration",
           "render_label_page", "render_report", "render_trend", "run_view", "stored_regression", "write_report"]


def run_view(store: StoreRef, run: str | None = None, *, max_cases: int | None = None) -> RunView:
    """A stored run, ready to report (``run`` is an id, a name, a unique prefix, or None for the latest). A run of
    more than ``max_cases`` cases is read without its verdicts (only the cases a page lists show them: the page reads
    theirs, ``RunView.fill``), which is most of what a large run holds."""
    from ..store import ResultsStore, open_store  # noqa: PLC0415

    s = open_store(store)
    try:
        run_id = s.resolve_run(run)
        info = s.run_info(run_id)
        lazy = bool(max_cases) and s.count_cases(run_id) > int(max_cases or 0)
        # labels attached after the run was scored (contextjudge label) give their gold scores here
        result = fill_gold_scores(s.load_run(run_id, verdicts=not lazy))
        judges = [j for j in info.judges or [] if isinstance(j, dict) and j.get("name")]
        if not judges:  # a run a worker judges (capture in mode "worker"): the judges its results name
            judges = [{"name": name} for name in result.judges()]
        view = RunView(result=result, run_id=run_id, name=info.name, created_at=info.created_at,
                       judges=judges, store=s.target, goldens=info.goldens)
        if lazy:
            view.fill = _verdicts_reader(store, run_id)
        return view
    finally:
        if not isinstance(store, ResultsStore):
            s.close()


def _verdicts_reader(store: StoreRef, run_id: str) -> Callable[[list[Any]], None]:
    """``RunView.fill`` of a run read without verdicts: reads those of the given cases from ``store``."""
    from ..store import ResultsStore, open_store  # noqa: PLC0415

    def fill(test_results: list[Any]) -> None:
        s = open_store(store)
        try:
            s.fill_verdicts(run_id, test_results)
        finally:
            if not isinstance(store, ResultsStore):
                s.close()
    return fill


def _as_view(x: Any, store: StoreRef | None, max_cases: int | None = None) -> RunView | None:
    return None if x is None else _view(x, store, max_cases)


def _view(x: Any, store: StoreRef | None, max_cases: int | None = None) -> RunView:
    if isinstance(x, RunView):
        return x
    if isinstance(x, EvaluationResult):
        return RunView(result=x, run_id=x.run_id)
    if store is None:
        raise ConfigurationTypeError(f"got {type(x).__name__} {x!r} without store=...: pass an EvaluationResult, "
                                     "or a run id together with store=...")
    return run_view(store, x, max_cases=max_cases)


def render_report(result: Any = None, *, store: StoreRef | None = None, run: str | None = None, compare: Any = None,
                  title: str | None = None, max_cases: int | None = DEFAULT_MAX_CASES) -> str:
    """The report as an HTML string: of ``result`` (an EvaluationResult) or of ``run`` in ``store``.

    ``compare`` is the baseline: an EvaluationResult, or a run id/name in ``store``. ``max_cases``: past this many
    cases the page lists in full those worth reading (errors, the lowest-scoring and most uncertain per metric, the
    most changed) and an even sample of the rest, with a note saying so; every figure still counts every case
    (0 or None: list every case).
    """
    if result is None:
        if store is None:
            raise ConfigurationTypeError("render_report() needs an EvaluationResult, or store=... (and optionally "
                                         "run=...): pass one of them.")
        current = run_view(store, run, max_cases=max_cases)
    else:
        current = _view(result, store, max_cases)
    current.max_cases = max_cases or None
    return render_html(current, _as_view(compare, store, max_cases), title=title)


def write_report(path: str | os.PathLike, result: Any = None, **kwargs: Any) -> str:
    """Write the report to ``path`` (see ``render_report`` for the arguments); returns the path."""
    text = render_report(result, **kwargs)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return os.fspath(path)


def is_report_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a plain file (not a link) holding a report this package wrote (its head as
    ``render_report`` writes it): what a tool that writes reports may replace, unlike any other file."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return head.startswith("<!DOCTYPE html>") and f"content=\"{CSP}\"" in head
