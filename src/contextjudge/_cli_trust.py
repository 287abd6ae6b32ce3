"""The trust commands of the CLI: ``contextjudge calibrate`` and ``contextjudge label`` (issue 16).

Registered by ``cli.build_parser``; shares its exit codes and helpers.
"""

from __future__ import annotations

import argparse

__all__ = ["add_trust_commands"]


def add_trust_commands(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` and ``label`` to the CLI's sub-commands (filled in by the calibration work)."""
    return None
