"""The metric registry: every metric class contextjudge knows by key, and the tables read from what each declares.

A metric class declares, beside its ``name`` and ``key``, its verdict ``family`` (``judges.families()``, with its
``reference_kind`` giving the calibration key of its verdicts: ``BaseMetric.calibration_key``), its gold
``label_field`` (which labels of a person are its verdicts), whether it
``always_gated`` or only where the judge is trusted for its family, and its command-line ``aliases``
(``BaseMetric``). Every table that maps labels, metrics and families is read from here, never written twice: the
gold scores (``_gold``), which metrics gate (``_defaults``), ``contextjudge calibrate`` (``engine._calibrate``),
``--metrics`` names (the CLI), the compat faces' names where a peer's name is our key.

The built-in metrics are registered on import; ``register_metric`` adds one of your own (docs/custom-metrics.md), so
``from_keys``, ``--metrics``, gold labels and calibration know it by its key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Set
from typing import Any, TypeVar

from ..cases.labels import LABEL_FIELDS
from ..errors import ConfigurationError
from ..judges import FAMILIES, families
from ._base import BaseMetric
from ._ranking import (
    HitRateMetric,
    MAPMetric,
    MRRMetric,
    NDCGMetric,
    PrecisionAtKMetric,
    RecallAtKMetric,
)
from ._single import (
    AnswerRelevancyMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    FaithfulnessMetric,
    RubricContextRecallMetric,
)
from ._turn import TurnContextualPrecisionMetric, TurnContextualRecallMetric, TurnContextualRelevancyMetric

__all__ = ["ALWAYS_GATED", "BY_KEY", "FAMILY_OF_KEY", "JUDGE_FREE", "metric_aliases", "metric_class",
           "metrics_of_field", "register_metric", "registered_metrics", "unregister_metric"]

M = TypeVar("M", bound=type[BaseMetric])

# key -> metric class, in registration order (the built-ins first): the registry itself
BY_KEY: dict[str, type[BaseMetric]] = {}
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def register_metric(cls: M) -> M:
    """Make ``cls`` (a ``BaseMetric`` subclass) known by its ``key``: ``from_keys``, the command line's
    ``--metrics``, gold scores from its ``label_field``, ``contextjudge calibrate`` and the gates then read it. Usable
    as a class decorator; returns ``cls``. Registering the same class again does nothing; a key, or an alias, that
    another class holds raises ``ConfigurationError``."""
    if not (isinstance(cls, type) and issubclass(cls, BaseMetric)):
        raise ConfigurationError(f"register_metric takes a BaseMetric subclass, got {cls!r}.")
    key = getattr(cls, "key", None)
    where = f"{cls.__qualname__}"
    if cls is BaseMetric or not isinstance(key, str) or not _KEY.match(key) or key == BaseMetric.key:
        raise ConfigurationError(f"{where}: give the class a key of its own, lower case letters, digits and '_' "
                                 f"(key = \"my_metric\"), got {key!r}.")
    if BY_KEY.get(key) is cls:
        return cls
    if key in BY_KEY:
        raise ConfigurationError(f"{where}: the key {key!r} is {BY_KEY[key].__qualname__}'s; choose another key.")
    if cls.label_field is not None and cls.label_field not in LABEL_FIELDS:
        raise ConfigurationError(f"{where}: label_field {cls.label_field!r} is not a gold label field; use one of "
                                 f"{', '.join(LABEL_FIELDS)}, or None.")
    named = [f.name for f in families()]
    if cls.family is not None and cls.family not in named:
        raise ConfigurationError(f"{where}: family must name a verdict family ({', '.join(named)}; "
                                 f"judges.register_family adds one) or be None, got {cls.family!r}.")
    if cls.label_field is not None and cls.calibration_key() not in FAMILIES:
        raise ConfigurationError(f"{where}: a metric with a label_field says which verdict family its labels check, "
                                 f"one whose verdicts calibration keys ({', '.join(FAMILIES)}): set family (and "
                                 f"reference_kind), got {cls.family!r} ({cls.calibration_key()!r}).")
    taken = metric_aliases()
    for alias in cls.aliases:
        if alias in BY_KEY or (alias in taken and taken[alias] != key):
            raise ConfigurationError(f"{where}: the alias {alias!r} already names {taken.get(alias, alias)!r}.")
    BY_KEY[key] = cls
    return cls


def unregister_metric(cls: type[BaseMetric] | str) -> None:
    """Forget a metric registered with ``register_metric`` (its class or key); an unknown one is ignored."""
    key = cls if isinstance(cls, str) else getattr(cls, "key", None)
    if isinstance(key, str) and key in BY_KEY and (isinstance(cls, str) or BY_KEY[key] is cls):
        del BY_KEY[key]


def registered_metrics() -> list[type[BaseMetric]]:
    """Every registered metric class, the built-in ones first, in registration order."""
    return list(BY_KEY.values())


def metric_aliases() -> dict[str, str]:
    """Every alias a registered metric declares -> its key (``--metrics precision`` is contextual_precision)."""
    return {alias: cls.key for cls in BY_KEY.values() for alias in cls.aliases}


def _norm(text: str) -> str:
    return str(text).strip().lower().replace(" ", "_").replace("-", "_")


def metric_class(name: str) -> type[BaseMetric] | None:
    """The registered class of a metric named as results name it ("Contextual Precision"), by its key
    ("contextual_precision", any case, ``-`` or a space for ``_``), or None. A ranking metric's cut-off is read
    off: "NDCG@5", "ndcg@5"."""
    if not isinstance(name, str):
        return None
    for cls in BY_KEY.values():
        if cls.name == name:
            return cls
    if name in BY_KEY:
        return BY_KEY[name]
    norm = _norm(name)
    return BY_KEY.get(norm) or BY_KEY.get(norm.partition("@")[0])


def metrics_of_field(field: str) -> list[type[BaseMetric]]:
    """The registered metrics whose gold labels are ``field``'s, in registration order."""
    return [cls for cls in BY_KEY.values() if cls.label_field == field]


class _KeyTable(Mapping[str, str]):
    """A read-only mapping read from the registry each time (so a metric registered later is in it)."""

    def __init__(self, value: Callable[[type[BaseMetric]], Any]) -> None:
        self._value = value

    def _items(self) -> dict[str, str]:
        return {k: v for k, cls in BY_KEY.items() if (v := self._value(cls)) is not None}

    def __getitem__(self, key: str) -> str:
        return self._items()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return repr(self._items())


class _KeySet(Set[str]):
    """A read-only set of registered keys read from the registry each time."""

    def __init__(self, test: Callable[[type[BaseMetric]], bool]) -> None:
        self._test = test

    @classmethod
    def _from_iterable(cls, it: Any) -> frozenset[Any]:
        """What set operations (``&``, ``-``, ...) on the view give: a frozenset."""
        return frozenset(it)

    def _keys(self) -> frozenset[str]:
        return frozenset(k for k, cls in BY_KEY.items() if self._test(cls))

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._keys()))

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return f"{{{', '.join(repr(k) for k in self)}}}"


# metric key -> the calibration key of the verdicts it asks for (judged metrics only; ``BaseMetric.calibration_key``)
FAMILY_OF_KEY: Mapping[str, str] = _KeyTable(lambda cls: cls.calibration_key())
# judged metrics that gate whatever the judge: the embedded judge agrees with users on their family
ALWAYS_GATED: Set[str] = _KeySet(lambda cls: cls.family is not None and cls.always_gated)
# the keys whose metrics never call a judge
JUDGE_FREE: Set[str] = _KeySet(lambda cls: not cls.needs_judge)

for _cls in (ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric, ContextUtilizationMetric,
             TurnContextualRelevancyMetric, TurnContextualPrecisionMetric, TurnContextualRecallMetric,
             RubricContextRecallMetric, FaithfulnessMetric, AnswerRelevancyMetric,
             HitRateMetric, MRRMetric, PrecisionAtKMetric, RecallAtKMetric, MAPMetric, NDCGMetric):
    register_metric(_cls)
