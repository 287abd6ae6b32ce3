"""``contextjudge worker --store URL``: score the cases a capture queued, out of the app's process.
CONTRACT: ``add_worker_command(sub)`` registers the subcommand."""

from __future__ import annotations

import argparse

__all__ = ["add_worker_command"]


def add_worker_command(sub: argparse._SubParsersAction) -> None:
    """Register ``worker`` (filled in by the worker helper)."""
