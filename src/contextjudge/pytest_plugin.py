"""The contextjudge pytest plugin: judge options, fixtures, and a results store for ``assert_test``.

Registered through the ``pytest11`` entry point and inert until used: it only adds options and fixtures, and opens
nothing until a test asks for a fixture or calls ``assert_test``.

Options (also settable in the ini file as ``contextjudge_model`` / ``contextjudge_store``):

- ``--contextjudge-model MODEL``: the judge for metrics built without a model (``local``, ``fake``, an OpenAI model
  name, ``provider:model``). ``fake`` is the scripted offline ``FakeJudge``, handy for wiring tests.
- ``--contextjudge-store PATH_OR_URL``: keep every ``assert_test`` result in this store, as one run per session.
- ``--contextjudge-run-id ID``: the run id in the store (default: a new one per session).
- ``--contextjudge-min-pass-rate RATE`` (ini ``contextjudge_min_pass_rate``): gate the session on pass rates instead
  of single cases. A case scoring below its metric's threshold no longer fails its test (a case whose metric errored
  still does); the session fails (exit 1, with one line saying which metric and why) only when a metric's pass rate
  is below RATE with its whole 95% interval, so a few unlucky cases around a threshold do not decide a run.

The terminal summary shows each metric's mean and pass rate with their 95% intervals over the session's cases.

Fixtures: ``contextjudge_judge`` (the configured judge model), ``contextjudge_store`` (the open store, or None),
``contextjudge`` (both, plus ``assert_test`` bound to them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

__all__ = ["ContextJudgeSession", "current_session"]

# pytest forces one registry per process: the configured session, which assert_test reads; guarded by a lock
_lock = threading.Lock()
_sessions: list[ContextJudgeSession] = []


def current_session() -> ContextJudgeSession | None:
    """The configured session of the running pytest, or None outside pytest."""
    with _lock:
        return _sessions[-1] if _sessions else None


class ContextJudgeSession:
    """What the options configure: the judge, the store and the run id; everything is opened on first use."""

    def __init__(self, model_arg: str | None, store_target: str | None, run_id: str | None,
                 min_pass_rate: float | None = None) -> None:
        self.model_arg_text = model_arg
        # with a pass-rate gate, below-threshold cases do not fail their tests (assert_test reads this)
        self.min_pass_rate = min_pass_rate
        self.tally: Any = None  # running totals per metric (a Tally), made by the first result
        self.gate_failures: list[str] = []
        self.store_target = store_target
        self._run_id = run_id
        self._judge: Any = None
        self._run: Any = None
        self._lock = threading.RLock()
        self.cases = 0
        self.failed = 0
        self.below = 0
        self.errored = 0
        self.metric_errors: dict[str, int] = {}

    @property
    def model_arg(self) -> Any:
        """What metrics built without a model receive (a chat model for ``fake``, else the string)."""
        if self.model_arg_text and self.model_arg_text.strip().lower() == "fake":
            return self.judge
        return self.model_arg_text

    @property
    def judge(self) -> Any:
        """The session's judge, built once from ``--contextjudge-model`` (``fake`` gives ``FakeJudge``)."""
        with self._lock:
            if self._judge is None:
                text = (self.model_arg_text or "").strip()
                if text.lower() == "fake":
                    from .testing import FakeJudge  # noqa: PLC0415

                    self._judge = FakeJudge()
                else:
                    from .judges import resolve_model  # noqa: PLC0415

                    self._judge = resolve_model(text or None)
            return self._judge

    @property
    def run(self) -> Any:
        """The session's run in the store (begun on first use, ended when pytest ends), or None without a store."""
        with self._lock:
            if self._run is None and self.store_target:
                from .engine import Run  # noqa: PLC0415

                self._run = Run(store=self.store_target, run_id=self._run_id, name="pytest",
                                config={"mode": "pytest"})
                self._run_id = self._run.begin()
            return self._run

    @property
    def store(self) -> Any:
        """The store of the session's run, or None without ``--contextjudge-store``."""
        run = self.run
        return None if run is None else run.store

    @property
    def run_id(self) -> str | None:
        """The session's run id (the run is begun first when there is a store)."""
        if self.store_target:
            _ = self.run
        return self._run_id

    @property
    def gates_on_pass_rate(self) -> bool:
        """Whether the session fails on a metric's pass rate (``--contextjudge-min-pass-rate``)."""
        return self.min_pass_rate is not None

    def record(self, result: Any) -> None:
        """Add a test's results to the session's tally and error counts."""
        with self._lock:
            if self.tally is None:
                from ._result import Tally  # noqa: PLC0415 - imported only once a test used contextjudge

                self.tally = Tally()
            for tr in result.test_results:
                self.tally.add(tr)
            self.cases += len(result.test_results)
            self.failed += sum(not tr.success for tr in result.test_results)
            self.below += sum(any(m.error is None and not m.success for m in tr.metrics_data)
                              for tr in result.test_results)
            for tr in result.test_results:
                errors = [m.name for m in tr.metrics_data if m.error]
                self.errored += bool(errors or tr.error)
                for name in errors:
                    self.metric_errors[name] = self.metric_errors.get(name, 0) + 1

    def summary_lines(self) -> list[str]:
        """Per metric: its mean and pass rate over the session's cases, each with its 95% interval."""
        lines = []
        for name, row in (self.tally.summary() if self.tally is not None else {}).items():
            lines.append(f"  {name}: mean {_with_ci(row['mean'], row['mean_ci'])}, pass rate "
                         f"{_with_ci(row['pass_rate'], row['pass_rate_ci'])} ({row['scored']} scored"
                         + (f", {row['errors']} error(s))" if row["errors"] else ")"))
        return lines

    def check_pass_rates(self) -> list[str]:
        """With a pass-rate gate: one line per metric whose pass rate is below it with its whole interval."""
        if self.min_pass_rate is None or self.tally is None:
            return []
        out = []
        for name, m in self.tally.metrics.items():
            iv = m.pass_rate_interval()
            if iv.high is not None and iv.high < self.min_pass_rate:
                out.append(f"{name} pass rate {iv.estimate:.3f} [{iv.low:.3f}, {iv.high:.3f}] over {iv.n} result(s) "
                           f"is below {self.min_pass_rate:g} with its whole 95% interval")
        return out

    def assert_test(self, test_case: Any, metrics: Sequence[Any], **kwargs: Any) -> Any:
        """``contextjudge.assert_test`` with this session's judge and store."""
        __tracebackhide__ = True  # a failing test's traceback ends in the test, not in contextjudge
        from .engine import assert_test  # noqa: PLC0415

        return assert_test(test_case, metrics, **kwargs)

    def close(self) -> None:
        """End the session's run in the store with its counts and usage."""
        with self._lock:
            run, self._run = self._run, None
        if run is not None:
            run.end({"cases": self.cases, "failed": self.failed, "errored": self.errored,
                     "errors": dict(self.metric_errors), "usage": run.context.usage.to_dict()})
            run.store.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("contextjudge", "contextjudge: judge retrieval quality in tests")
    group.addoption("--contextjudge-model", dest="contextjudge_model", default=None, metavar="MODEL",
                    help="judge for metrics built without a model: local, fake, an OpenAI model name or "
                         "provider:model (default: CONTEXTJUDGE_MODEL, else OpenAI with a key, else local)")
    group.addoption("--contextjudge-store", dest="contextjudge_store", default=None, metavar="PATH_OR_URL",
                    help="keep assert_test results in this store (SQLite path or SQLAlchemy URL), one run per session")
    group.addoption("--contextjudge-run-id", dest="contextjudge_run_id", default=None, metavar="ID",
                    help="run id for --contextjudge-store (default: a new run per session)")
    group.addoption("--contextjudge-min-pass-rate", dest="contextjudge_min_pass_rate", default=None,
                    metavar="RATE",
                    help="gate on pass rates: cases below a threshold no longer fail their tests (errors still do); "
                         "the session fails when a metric's pass rate is below RATE (0..1) with its whole 95%% "
                         "interval")
    parser.addini("contextjudge_model", "default for --contextjudge-model", default=None)
    parser.addini("contextjudge_store", "default for --contextjudge-store", default=None)
    parser.addini("contextjudge_min_pass_rate", "default for --contextjudge-min-pass-rate", default=None)


def _option(config: pytest.Config, name: str) -> str | None:
    value = config.getoption(name, default=None)
    if value:
        return value
    try:
        ini = config.getini(name)
    except ValueError:
        return None
    return ini or None


def _rate(config: pytest.Config) -> float | None:
    text = _option(config, "contextjudge_min_pass_rate")
    if text is None or str(text).strip() == "":
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise pytest.UsageError(f"--contextjudge-min-pass-rate {text!r}: expected a share between 0 and 1, e.g. 0.8.")
    return rate


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def pytest_configure(config: pytest.Config) -> None:
    session = ContextJudgeSession(_option(config, "contextjudge_model"), _option(config, "contextjudge_store"),
                                  config.getoption("contextjudge_run_id", default=None), _rate(config))
    config.stash[_KEY] = session
    with _lock:
        _sessions.append(session)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_KEY, None)
    if session is None:
        return
    session.close()
    with _lock:
        if session in _sessions:
            _sessions.remove(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cj = session.config.stash.get(_KEY, None)
    if cj is None or cj.cases == 0:
        return
    cj.gate_failures = cj.check_pass_rates()
    if cj.gate_failures and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(_KEY, None)
    if session is None or session.cases == 0:
        return  # inert unless a test used contextjudge
    line = (f"contextjudge: {session.cases} test case(s) scored, {session.below} below threshold, "
            f"{session.errored} with an error")
    if session.metric_errors:
        line += "; errors: " + ", ".join(f"{name} {n}" for name, n in sorted(session.metric_errors.items()))
    if session.store_target:
        line += f"; results in run {session.run_id} of {session.store_target}"
    terminalreporter.write_line(line)
    for metric_line in session.summary_lines():
        terminalreporter.write_line(metric_line)
    if session.min_pass_rate is not None:
        if session.gate_failures:
            terminalreporter.write_line("contextjudge: FAILED: " + "; ".join(session.gate_failures), red=True)
        else:
            terminalreporter.write_line(f"contextjudge: pass-rate gate {session.min_pass_rate:g} passed (no metric "
                                        "is below it with its whole 95% interval)")


_KEY = pytest.StashKey[ContextJudgeSession]()


@pytest.fixture(scope="session")
def contextjudge(request: pytest.FixtureRequest) -> ContextJudgeSession:
    """The configured contextjudge session: ``.judge``, ``.store``, ``.run_id`` and ``.assert_test(case, metrics)``."""
    return request.config.stash[_KEY]


@pytest.fixture(scope="session")
def contextjudge_judge(contextjudge: ContextJudgeSession) -> Any:
    """The judge chat model chosen with ``--contextjudge-model`` (pass it as ``model=`` to metrics)."""
    return contextjudge.judge


@pytest.fixture(scope="session")
def contextjudge_store(contextjudge: ContextJudgeSession) -> Any:
    """The results store chosen with ``--contextjudge-store``, or None."""
    return contextjudge.store
