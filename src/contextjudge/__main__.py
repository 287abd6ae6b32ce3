"""``python -m contextjudge``: the command line, for environments where the ``contextjudge`` script is not on PATH."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
