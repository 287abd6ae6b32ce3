"""``python -m contextjudge_langchain.demo``: the same as ``contextjudge demo``."""

import sys

from . import main

sys.exit(main())
