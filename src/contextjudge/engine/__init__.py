"""The engine room: drives test cases through the stages. ``Run`` owns a run's judge context, cache, store and
life; ``score_case`` scores one case in a run; ``evaluate`` (many cases), the capture session (captured cases),
``assert_test`` (one case, in a test), the worker and the Ray engine are built on the two.

Users reach the engine through the root (``evaluate``, ``aevaluate``, ``assert_test``, ``estimate``,
``EvaluationOptions``); the modules here are private, and the core's other rooms (capture, the CLI, the peers'
faces) import the names below from this door, never a private module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_door

# what users write in their code
_PUBLIC = {
    "EvaluationOptions": "._evaluate",
    "Run": "._run",
    "score_case": "._score",
}
# what the core's other rooms use: reachable here, not part of the public API, may change in any release
_CORE = {
    "BudgetSkip": "._score",
    "DEFAULT_METRIC_KEYS": "._worker",
    "MIN_EACH": "._calibrate",
    "MIN_ITEMS": "._calibrate",
    "RayEngine": "._ray_engine",
    "SKIPPED_ADVICE": "._worker",
    "Worker": "._worker",
    "WorkerMetrics": "._worker_metrics",
    "acalibrate": "._calibrate",
    "LabelSession": "._labelling",
    "MetricGate": "._gates",
    "StoreWorkspace": "._workspace",
    "ToolArgumentError": "._workspace",
    "builtin_check_path": "._workspace",
    "embedded_beside": "._workspace",
    "estimate_cost": "._workspace",
    "judge_check": "._workspace",
    "score_one": "._workspace",
    "stratified": "._workspace",
    "errored_cases": "._gates",
    "figure_text": "._gates",
    "metric_gates": "._gates",
    "result_threshold": "._gates",
    "threshold_text": "._gates",
    "annotator_agreement": "._labelling",
    "calibrate_order": "._labelling",
    "corrected_means": "._labelling",
    "labels_given": "._labelling",
    "labels_needed": "._labelling",
    "aevaluate": "._evaluate",
    "assert_test": "._assertions",
    "calibration_of": "._calibrate",
    "copy_run": "._ray_engine",
    "estimate": "._estimate",
    "evaluate": "._evaluate",
    "finish_run": "._ray_engine",
    "Chunk": "._synthesize",
    "DEFAULT_STYLES": "._synthesize",
    "GenerationResult": "._synthesize",
    "STYLES": "._synthesize",
    "StoredNodes": "._synthesize",
    "estimate_generation": "._synthesize",
    "generate_goldens": "._synthesize",
    "goldens_from_store": "._traffic",
    "read_chunks": "._synthesize",
    "write_goldens": "._synthesize",
    "format_failures": "._assertions",
    "limit_cpu": "._worker",
    "metric_config": "._run",
    "metric_specs": "._run",
    "metrics_for_run": "._worker",
    "read_labels_file": "._calibrate",
    "require_ray": "._ray_engine",
    "score_within_budget": "._score",
    "keep_store_calibration": "._store_calibration",
    "choose_judge": "._choice",
    "judge_on_store": "._choice",
    "kept_verdicts": "._judged",
    "store_calibrated": "._store_calibration",
}
_EXPORTS = {**_CORE, **_PUBLIC}

__all__ = ["EvaluationOptions", "Run", "score_case"]


__getattr__, __dir__ = lazy_door(__name__, globals(), _EXPORTS, _PUBLIC)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from ._assertions import assert_test, format_failures
    from ._calibrate import MIN_EACH, MIN_ITEMS, acalibrate, calibration_of, read_labels_file
    from ._choice import choose_judge, judge_on_store
    from ._estimate import estimate
    from ._evaluate import EvaluationOptions, aevaluate, evaluate
    from ._gates import MetricGate, errored_cases, figure_text, metric_gates, result_threshold, threshold_text
    from ._judged import kept_verdicts
    from ._labelling import (
        LabelSession,
        annotator_agreement,
        calibrate_order,
        corrected_means,
        labels_given,
        labels_needed,
    )
    from ._ray_engine import RayEngine, copy_run, finish_run, require_ray
    from ._run import Run, metric_config, metric_specs
    from ._score import BudgetSkip, score_case, score_within_budget
    from ._store_calibration import keep_store_calibration, store_calibrated
    from ._synthesize import (
        DEFAULT_STYLES,
        STYLES,
        Chunk,
        GenerationResult,
        StoredNodes,
        estimate_generation,
        read_chunks,
        write_goldens,
    )
    from ._synthesize import generate as generate_goldens
    from ._traffic import from_store as goldens_from_store
    from ._worker import DEFAULT_METRIC_KEYS, SKIPPED_ADVICE, Worker, limit_cpu, metrics_for_run
    from ._worker_metrics import WorkerMetrics
    from ._workspace import (
        StoreWorkspace,
        ToolArgumentError,
        builtin_check_path,
        embedded_beside,
        estimate_cost,
        judge_check,
        score_one,
        stratified,
    )
