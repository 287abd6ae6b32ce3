"""The one error hierarchy of contextjudge.

    ContextJudgeError                 base of everything raised on purpose
    ├── ConfigurationError            an argument to a contextjudge function or class has the wrong value
    │   │                             (also a ValueError)
    │   └── ConfigurationTypeError    ... or the wrong type (also a TypeError)
    ├── UsageError                    a mistake on the ``contextjudge`` command line or in a file it reads
    ├── MetricNotFoundError           a result was asked for a metric it does not hold (also a KeyError)
    ├── InvalidTestCaseError          a test case field has the wrong type or value (also a ValueError)
    ├── MissingTestCaseParamsError    a metric needs a field the test case does not have
    ├── JudgeError                    the judge could not produce a usable verdict
    │   ├── JudgeOutputError          the judge answered, but not in a form we can use (after re-asks)
    │   ├── JudgeResponseError        the server answered, but not with a completion (an HTML page, no
    │   │                             choices); transient: retried, and named in the error that ends them
    │   ├── JudgeUnavailableError     the judge cannot be reached or refuses us (auth, bad request,
    │   │                             retries exhausted, deadline passed, not installed)
    │   └── BudgetExhaustedError      a judge call refused before it was sent: a spend budget has no room
    │                                 left in its window (the case is skipped and counted)
    ├── StoreError                    the results store cannot be opened, read or written
    ├── CaptureError                  a capture integration could not assemble a test case
    └── SyncCallOnLoopError           a sync call made from contextjudge's own event loop (also a RuntimeError)

    JudgeChoiceWarning                a warning (UserWarning), not an error: metrics built without model= were
                                      given the default judge, named in the message (once per process and judge)

Every message says what to do about it. Third-party errors are translated at one boundary
(the judge client) and chained with ``raise ... from exc``. Where an error stands for one of Python's own
(``ValueError``, ``TypeError``, ``KeyError``), it subclasses it too, so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "BudgetExhaustedError",
    "CaptureError",
    "ConfigurationError",
    "ConfigurationTypeError",
    "ContextJudgeError",
    "InvalidTestCaseError",
    "JudgeChoiceWarning",
    "JudgeError",
    "JudgeOutputError",
    "JudgeResponseError",
    "JudgeUnavailableError",
    "MetricNotFoundError",
    "MissingTestCaseParamsError",
    "StoreError",
    "SyncCallOnLoopError",
    "UsageError",
]


class JudgeChoiceWarning(UserWarning):
    """Metrics built without ``model=`` use the default judge; this says which one, and why, once per process and
    judge, so the choice is visible without configuring logging. Pass ``model=`` (or set ``CONTEXTJUDGE_MODEL``) to
    choose, which also silences it; or ``warnings.filterwarnings("ignore", category=JudgeChoiceWarning)``."""


class ContextJudgeError(Exception):
    """Base class of every error contextjudge raises on purpose."""


class ConfigurationError(ContextJudgeError, ValueError):
    """An argument to a contextjudge function or class has the wrong value. The message names the argument and
    what to pass instead."""


class ConfigurationTypeError(ConfigurationError, TypeError):
    """An argument to a contextjudge function or class has the wrong type. The message names the argument and what
    to pass instead."""


class UsageError(ContextJudgeError):
    """A mistake on the ``contextjudge`` command line or in a file it reads. The command prints the message (it says
    what to fix) and exits with its usage exit code."""


class MetricNotFoundError(ContextJudgeError, KeyError):
    """A result was asked for a metric it does not hold. The message lists the metrics it has."""

    def __str__(self) -> str:  # KeyError would show the message quoted, as a repr
        return str(self.args[0]) if self.args else ""


class InvalidTestCaseError(ContextJudgeError, ValueError):
    """A test case field has the wrong type or value. The message names the field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class MissingTestCaseParamsError(ContextJudgeError):
    """A metric needs a test-case field that is missing. Names the metric and the field."""

    def __init__(self, metric: str, fields: list[str]) -> None:
        self.metric = metric
        self.fields = list(fields)
        names = ", ".join(f"'{f}'" for f in self.fields)
        super().__init__(
            f"{metric} needs {names} on the test case, but it is missing. "
            f"Set {names} on the test case (for captured runs: pass goldens with an expected_output), "
            f"or drop {metric} from the metrics."
        )


class JudgeError(ContextJudgeError):
    """The judge could not produce a usable verdict."""


class JudgeOutputError(JudgeError):
    """The judge answered, but its answer could not be used, even after a re-ask."""

    def __init__(self, message: str, *, raw: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw


class JudgeResponseError(JudgeError):
    """The judge's server answered, but what came back is not a chat completion (an HTML page from a proxy, an
    empty ``choices`` list, a body the provider's SDK cannot read). Treated as transient: the call is retried."""


class JudgeUnavailableError(JudgeError):
    """The judge cannot be reached, refuses the request, or is not installed."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class BudgetExhaustedError(JudgeError):
    """A judge call was refused before it was sent because a spend budget (``judges._spend.Budget``) has no room
    left in its window; judging resumes when the window turns over (``resumes_at``, seconds since the epoch).
    Capture and ``contextjudge worker`` skip the case and count it; ``evaluate`` records an error result that says
    so (``score_case(budget="record")``). Never a score."""

    def __init__(self, message: str, *, scope: str | None = None, resumes_at: float | None = None) -> None:
        super().__init__(message)
        self.scope = scope
        self.resumes_at = resumes_at


class StoreError(ContextJudgeError):
    """The results store cannot be opened, read or written."""


class CaptureError(ContextJudgeError):
    """A capture integration could not assemble a test case."""


class SyncCallOnLoopError(ContextJudgeError, RuntimeError):
    """A sync facade (``evaluate``, ``measure``, ``flush``) was called from code running on contextjudge's own event
    loop, where it could only wait for itself. Await the async form instead."""
