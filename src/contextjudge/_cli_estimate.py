"""``contextjudge estimate``: what judging a run, a goldens file or a sampling rate would cost, before anything is
judged (no judge call is made). CONTRACT: ``add_estimate_command(sub)`` registers the subcommand."""

from __future__ import annotations

import argparse

__all__ = ["add_estimate_command"]


def add_estimate_command(sub: argparse._SubParsersAction) -> None:
    """Register ``estimate`` (filled in by the budgets helper)."""
