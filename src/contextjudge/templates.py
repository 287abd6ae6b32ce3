"""The public spelling of the judge prompt templates (they live in ``contextjudge.judges.templates``).

Subclass a template and pass it as a metric's ``evaluation_template`` to change what the judge is asked.
"""

from .judges.templates import *  # noqa: F403
from .judges.templates import __all__  # noqa: F401
