"""``ragas.run_config.RunConfig``: ``max_workers`` becomes the cases in flight; ``timeout`` the seconds one judge
attempt may take; ``max_retries`` the judge's attempts after the first."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunConfig"]


@dataclass
class RunConfig:
    """Ragas' ``RunConfig``: ``max_workers``, ``timeout`` and ``max_retries`` set how contextjudge runs."""

    timeout: int = 180
    max_retries: int = 10
    max_wait: int = 60
    max_workers: int = 16
    exception_types: tuple = (Exception,)
    log_tenacity: bool = False
    seed: int = 42
