"""The embedded judge calibrated on the store's labels, kept current while the worker runs (issue 47).

A worker given the bare embedded judge (``model="local"`` or ``"local-cross"``) judges with it as calibrated on the
store's labels (``engine.store_calibrated``), and looks again at most every ``recalibrate_every`` seconds: when the
store's labels changed (``labels_version``: a label added, changed or withdrawn through ``contextjudge label`` or the
labelling page), the calibration is read again (refitted only if the labels' fingerprint changed). The new judge
takes over between cases: the worker starts no case until those in flight, judged with the old calibration, are
done, so a case's verdicts all come from one calibration; its identity carries the calibration's hash, so the
verdict cache, the store and ``trend`` never mix the two.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ...judges import judge_identity, judge_name
from .._store_calibration import calibrates, store_calibrated

if TYPE_CHECKING:
    from ...store import CalibrationStore

logger = logging.getLogger("contextjudge")


class _StoreCalibration:
    """The judge a worker starts cases with, calibrated on ``store``'s labels: looked at again at most every
    ``every`` seconds (None: never; the judge is used as given). ``pending``: a newer calibration, waiting for the
    cases in flight to finish."""

    def __init__(self, store: CalibrationStore, judge: Any, every: float | None) -> None:
        self.store, self.bare, self.every = store, judge, every
        self.applies = (every is not None and judge is not None and hasattr(store, "labels_version")
                        and calibrates(judge))
        self.judge = judge  # the judge cases are started with
        self.pending: Any = None
        self._version: Any = None  # the store's labels version the judge was calibrated for
        self._next = 0.0  # time.monotonic() of the next look
        self._failing = False

    def due(self) -> bool:
        """Whether to look at the store's labels now (never while a newer calibration waits to take over)."""
        return self.applies and self.pending is None and time.monotonic() >= self._next

    def look(self) -> Any:
        """(In a store thread.) Look at the store's labels; when they changed since the last look, the judge
        calibrated on them (the bare judge where no fit beat the shipped weights), else None. The first look, at
        start, gives the judge to start with."""
        self._next = time.monotonic() + float(self.every or 0.0)
        try:
            version = self.store.labels_version()
        except Exception as exc:  # noqa: BLE001 - the worker goes on with the calibration it has
            if not self._failing:
                logger.warning("contextjudge: the worker could not read the store's labels (%s); it keeps judging "
                               "with %s", exc, judge_name(self.judge))
            self._failing = True
            return None
        self._failing = False
        if version == self._version:
            return None
        judge, _kept = store_calibrated(self.store, self.bare)
        self._version = version
        return judge

    def changed(self, judge: Any) -> bool:
        """After a look: whether ``judge`` differs from the one cases start with; if so it waits in ``pending``."""
        if judge is None or judge_identity(judge) == judge_identity(self.judge):
            return False
        self.pending = judge
        return True

    def take_over(self, first: bool = False) -> str:
        """The pending judge becomes the one cases start with (call when no case is in flight); what to say
        (``first``: at start)."""
        self.judge, self.pending = self.pending, None
        if first:
            return f"judging with {judge_name(self.judge)}, calibrated on the store's labels"
        return f"the store's labels changed; judging with {judge_name(self.judge)} from now on"
