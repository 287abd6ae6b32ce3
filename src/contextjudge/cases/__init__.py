"""The room of test cases: what a case is and what it carries.

The case types (also at the root: ``from contextjudge import LLMTestCase``) and goldens are exported here; the
modules hold the rest: ``testcase`` (the types and their checks), ``images`` (``MLLMImage`` and the image helpers
integrations build nodes with), ``goldens`` (loading and matching goldens), ``identity`` (case keys, generated ids,
the golden id), ``provenance`` (the metadata keys that say where a captured case came from) and ``labels`` (gold
labels). Names load on first use, so importing one of these modules stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_door

_EXPORTS = {
    "ConversationalTestCase": ".testcase",
    "Golden": ".goldens",
    "Goldens": ".goldens",
    "LLMTestCase": ".testcase",
    "MLLMImage": ".images",
    "RetrievedNode": ".testcase",
    "Turn": ".testcase",
    "load_goldens": ".goldens",
}

__all__ = ["ConversationalTestCase", "Golden", "Goldens", "LLMTestCase", "MLLMImage", "RetrievedNode", "Turn",
           "load_goldens"]


__getattr__, __dir__ = lazy_door(__name__, globals(), _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .goldens import Golden, Goldens, load_goldens
    from .images import MLLMImage
    from .testcase import ConversationalTestCase, LLMTestCase, RetrievedNode, Turn
