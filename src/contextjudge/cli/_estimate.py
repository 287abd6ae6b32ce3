"""``contextjudge estimate``: what judging a run, a goldens file or a sampling rate would cost, before anything is
judged (no judge call is made). ``add_estimate_command(sub)`` registers the subcommand."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_estimate_command"]

_DESCRIPTION = (
    "Say what judging would cost before anything is judged: judge calls, input and output tokens, and dollars where "
    "the judge's price is known (the price table that ships with contextjudge; prices change, check your "
    "provider's). The metrics build their real requests against a stand-in judge that answers every one; no judge "
    "is called and no key is needed. Give the cases as a goldens file (--goldens) or a stored run (--store, --run), "
    "and a sampling rate and a traffic rate to see the cost per day of production capture.")


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"the sample rate must be from 0 to 1, got {text}")
    return value


def _per_day(text: str) -> float:
    try:
        value = float(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"requests per day must be >= 0, got {text}")
    return value


def add_estimate_command(sub: argparse._SubParsersAction) -> None:
    """Register ``estimate``."""
    from ._shared import _common, _store_arg  # noqa: PLC0415 - the shared argument helpers

    p = sub.add_parser("estimate", help="what judging would cost, before anything is judged (no judge call)",
                       description=_DESCRIPTION)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--goldens", metavar="FILE", help="goldens file (.jsonl, .json or .csv)")
    _store_arg(src)
    p.add_argument("--run", help="the stored run whose cases to count (id, name or id prefix; default: the latest)")
    p.add_argument("--model", required=True,
                   help="the judge to price, e.g. gpt-4o-mini, claude-3-5-haiku-latest, local (it is never called)")
    p.add_argument("--metrics", nargs="+", metavar="METRIC",
                   help="metrics (default: the run's own, else the default set for what the goldens or cases "
                        "carry: ranking metrics with expected ids, precision and recall with an expected output, "
                        "relevancy, utilization and faithfulness)")
    p.add_argument("--sample-rate", type=_rate, default=1.0, metavar="R",
                   help="share of cases judged, 0-1 (default 1)")
    p.add_argument("--requests-per-day", type=_per_day, default=None, metavar="N",
                   help="the app's traffic: also say what a day costs at the sample rate")
    p.add_argument("--token-budget", type=int, default=None, metavar="N",
                   help="JudgeOptions.token_budget: request size before a request is split (default 6000)")
    p.add_argument("--max-output-tokens", type=int, default=None, metavar="N",
                   help="JudgeOptions.max_output_tokens: the answer cap, reserved per call when set")
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    _common(p)
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    from ..engine import estimate  # noqa: PLC0415
    from ..errors import UsageError  # noqa: PLC0415
    from ..judges import JudgeOptions  # noqa: PLC0415
    from ..metrics import default_metrics_for  # noqa: PLC0415
    from ._shared import EXIT_OK, _config_metric_keys, _metric_keys  # noqa: PLC0415

    source: Any
    observed = None
    if args.goldens:
        from ..goldens import load_goldens  # noqa: PLC0415

        source = load_goldens(args.goldens)
        if not len(source):
            raise UsageError(f"the goldens file {args.goldens!r} holds no goldens.")
        default_keys = default_metrics_for(source.items)
    else:
        from ._shared import _existing_store, _resolve  # noqa: PLC0415

        store = _existing_store(args.store)
        try:
            run_id = _resolve(store, args.run)
            source = [c.test_case for c in store.load_cases(run_id)]
            default_keys = (_config_metric_keys(store.run_info(run_id).config)
                            or default_metrics_for(source, actual_output=None, conversations=None))  # as `score`
            observed = store.answer_lengths(args.model)
        finally:
            store.close()
        if not source:
            raise UsageError(f"the run {run_id} holds no cases to estimate.")
    keys = _metric_keys(args.metrics, default_keys)
    kw: dict[str, Any] = {}
    if args.token_budget is not None:
        kw["token_budget"] = args.token_budget
    if args.max_output_tokens is not None:
        kw["max_output_tokens"] = args.max_output_tokens
    est = estimate(source, keys, model=args.model, sample_rate=args.sample_rate, per_day=args.requests_per_day,
                   judge_options=JudgeOptions(**kw) if kw else None, observed_output=observed)
    if args.json:
        sys.stdout.write(json.dumps(est.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(str(est) + "\n")
    return EXIT_OK
