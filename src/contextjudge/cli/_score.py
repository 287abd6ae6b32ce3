"""``contextjudge score``: score the cases a capture kept for later (mode ``"deferred"``), in this process or on Ray
actors (``--engine ray``); ``--rescore`` scores every case of a run again into a new run. Gates like ``eval``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ._shared import (
    _REPEATS_HELP,
    EXIT_OK,
    _build_metrics,
    _common,
    _config_metric_keys,
    _existing_store,
    _info,
    _judge,
    _metric_gates,
    _metric_keys,
    _not_gated,
    _positive_int,
    _print_summary,
    _progress,
    _repeats_arg,
    _resolve,
    _store_arg,
    _store_judge,
    _thresholds,
    _verdict,
)

if TYPE_CHECKING:
    from ..store import ResultsStore

__all__ = ["add_score_command", "cmd_score"]


def add_score_command(sub: argparse._SubParsersAction) -> None:
    """Register ``score``."""
    p = sub.add_parser("score", help="score the cases a capture kept for later (mode='deferred')",
                       description="Score the cases of a stored run that have no results yet (captured with "
                                   "mode='deferred'), and write the results into the same run. Gates and exits "
                                   "like `contextjudge eval` (0 ok, 1 a metric's mean below its threshold, 2 an "
                                   "error, 3 cases with an error unless --allow-errors).")
    _store_arg(p)
    p.add_argument("--run", help="run id or name (default: the latest run)")
    p.add_argument("--metrics", nargs="+", metavar="METRIC", help="metrics (default: those the capture was given, else the default set for "
                                                       "what the run's cases carry, as `eval` reads its goldens)")
    p.add_argument("--model", help="judge (see `contextjudge eval --help`)")
    p.add_argument("--threshold", action="append", metavar="[METRIC=]VALUE",
                   help="a metric's threshold, as in `contextjudge eval` (cases pass at score >= it, the run at "
                        "mean >= it)")
    p.add_argument("--allow-errors", action="store_true", help="do not fail (exit 3) on test cases with an error")
    p.add_argument("--repeats", type=_repeats_arg, metavar="K", help=_REPEATS_HELP)
    p.add_argument("--rescore", action="store_true",
                   help="score every case of --run again, into a NEW run (e.g. with another --model or template); "
                        "the old run is left as it is")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: in this process (default). ray: on Ray actors that each build the judge once and "
                        "claim cases from the store's queue (pip install \"contextjudge[ray]\"); a killed worker's "
                        "cases are claimed again and nothing is written twice")
    p.add_argument("--address", metavar="ADDR",
                   help="with --engine ray: the Ray cluster to join (e.g. ray://head:10001, or head:6379 on a node "
                        "of it); default: start a local Ray instance. Clusters need a PostgreSQL --store")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help="with --engine ray: scoring actors, one CPU each (default: every CPU of the local instance "
                        "or the cluster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _common(p)
    p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
    ray_engine = getattr(args, "engine", "local") == "ray"
    if not ray_engine and (getattr(args, "address", None) or getattr(args, "workers", None)):
        raise UsageError("--address and --workers are for --engine ray (scoring on a Ray cluster).")
    if ray_engine:
        from ..engine import require_ray  # noqa: PLC0415
        from ..errors import ConfigurationError  # noqa: PLC0415

        try:
            require_ray()
        except ConfigurationError as exc:
            raise UsageError(f"--engine ray: {exc}") from exc
    store = _existing_store(args.store, write=True)
    run_id = _resolve(store, args.run)
    info = store.run_info(run_id)
    rescore = bool(getattr(args, "rescore", False))
    cases = store.load_cases(run_id)
    todo = cases if rescore else [c for c in cases if c.scored == 0]  # as store.unscored_cases reads them
    if not todo:
        print(f"run {run_id}: nothing to " + ("re-score (it has no cases)." if rescore else
                                             "score (every case already has results)."))
        return EXIT_OK
    default_keys = _config_metric_keys(info.config) or _run_default_keys(cases)
    keys = _metric_keys(args.metrics, default_keys)
    threshold, per = _thresholds(args.threshold, "--threshold")
    if ray_engine:
        return _score_on_ray(args, store, run_id, info, todo, keys, threshold, per, rescore)
    judge = _store_judge(store, _judge(args.model, args.quiet), args.quiet)
    metrics = _build_metrics(keys, judge, threshold, per)
    from ..engine import evaluate  # noqa: PLC0415

    if rescore:  # a new run of the old run's cases (same keys), scored with this judge and these metrics
        _info(f"re-scoring the {len(todo)} case(s) of run {run_id} into a new run with "
              f"{', '.join(m.name for m in metrics)} ...", args.quiet)
        result = evaluate([c.test_case for c in todo], metrics, store=store, show_progress=_progress(args),
                          repeats=args.repeats, run_name=f"{info.name or run_id} rescore",
                          run_config={"rescore_of": run_id}, case_keys=[c.case_key for c in todo])
        print(f"rescore: run {result.run_id} (of run {run_id})")
    else:
        _info(f"scoring {len(todo)} deferred case(s) of run {run_id} with {', '.join(m.name for m in metrics)} ...",
              args.quiet)
        result = evaluate([c.test_case for c in todo], metrics, store=store, run_id=run_id,
                          show_progress=_progress(args), repeats=args.repeats,
                          case_keys=[c.case_key for c in todo])  # results go to the stored cases, under their keys
    gates = _metric_gates(result, metrics, None, _not_gated(metrics, judge, per))
    _print_summary(result, gates, judge)
    _budget_skipped_line(result)
    return _verdict(result, gates, args.allow_errors)


def _run_default_keys(cases: list[Any]) -> list[str]:
    """The default metrics of a stored run whose configuration names none: from what its cases carry, as ``eval``
    reads its goldens (``metrics.default_metrics_for``: the ranking metrics with expected ids or texts, precision and
    recall with an expected output, utilization and faithfulness with the app's answer, turn relevancy for
    conversations). Read from every case of the run, scored or not, so each round of a run scored in parts gets the
    same set."""
    from ..metrics import default_metrics_for  # noqa: PLC0415

    return default_metrics_for([c.test_case for c in cases], actual_output=None, conversations=None)


def _budget_skipped_line(result: Any) -> None:
    """Say how many cases a spent budget skipped, and how to judge them."""
    skipped = sum(1 for tr in result.test_results
                  if any(m.error_type == "BudgetExhaustedError" for m in tr.metrics_data or []))
    if skipped:
        print(f"{skipped} case(s) were skipped by the judge budget and have no score: run `contextjudge score --run "
              f"{result.run_id}` again when the budget's next window opens (it judges only what has no result yet), "
              "or raise the budget's limits.")


def _score_on_ray(args: argparse.Namespace, store: ResultsStore, run_id: str, info: Any, todo: list[Any], keys: list[str],
                  threshold: float | None, per: dict[str, float], rescore: bool) -> int:
    """`contextjudge score --engine ray`: queue the run's unscored cases (or, with --rescore, copy every case into a
    new run), score them on Ray actors that claim them from the store's queue, and gate like the local engine."""
    from .._version import __version__  # noqa: PLC0415
    from ..engine import (  # noqa: PLC0415
        RayEngine,
        copy_run,
        finish_run,
        metric_config,  # noqa: PLC0415
    )
    from ..errors import ConfigurationError  # noqa: PLC0415
    from ..judges import JudgeOptions  # noqa: PLC0415

    metrics = _build_metrics(keys, None, threshold, per)
    spec = args.model  # built on each Ray worker, once: "local", "openai:...", "fake", "@calibration.json" or None
    _info(f"judge: {spec or 'the default judge ($CONTEXTJUDGE_MODEL, else OpenAI with OPENAI_API_KEY, else local)'}"
          ", built once on each Ray worker", args.quiet)
    if rescore:
        config = {"metrics": [metric_config(m) for m in metrics], "judges": [{"name": spec or "default"}],
                  "contextjudge": __version__, "cases": len(todo), "engine": "ray"}
        old = run_id
        run_id = copy_run(store, old, config)
        _info(f"rescore: run {run_id} holds the {len(todo)} case(s) of run {old}", args.quiet)
    else:
        store.enqueue(run_id, only_unscored=True)
    _info(f"scoring {len(todo)} case(s) of run {run_id} on Ray with {', '.join(m.name for m in metrics)} ...",
          args.quiet)
    options = JudgeOptions(repeats=args.repeats) if args.repeats else None

    def say(text: str) -> None:
        _info(text, args.quiet)

    engine = RayEngine(store, model=spec, metrics=metrics, address=args.address, workers=args.workers,
                       judge_options=options, log=say)
    try:
        report = engine.score(run_id)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from exc
    say(report.line())
    if not report.complete:
        say(f"ray: stopped before every case was scored ({report.stopped_because or report.queue}); run the same "
            "command again to finish")
    result = finish_run(store, run_id, report, [c.case_key for c in todo], seconds=report.seconds)
    if rescore:
        print(f"rescore: run {run_id} (of run {info.run_id})")
    gates = _metric_gates(result, metrics)
    _print_summary(result, gates)
    return _verdict(result, gates, args.allow_errors)
