"""The public spelling of goldens (they live in ``contextjudge.cases.goldens``): ``Golden``, ``Goldens`` and
``load_goldens`` for lists of dicts, JSONL and CSV files."""

from .cases.goldens import *  # noqa: F403
from .cases.goldens import __all__  # noqa: F401
