"""Shared fixtures: a ten-node case, and one throwaway PostgreSQL server for the whole session (``pg_url``; a wiped
store on it: ``pg_store``), used by every module that tests the PostgreSQL backend.

PostgreSQL comes from Debian's postgresql package. Set ``CONTEXTJUDGE_TEST_PG_URL`` to use a server you already run
instead (its contextjudge tables are emptied by ``pg_store``)."""

from __future__ import annotations

import os

import pytest
from throwaway_pg import ThrowawayPostgres

from contextjudge import LLMTestCase

TEN_NODES = [
    "Paris is the capital and most populous city of France.",
    "Bananas are a tropical fruit rich in potassium.",
    "The Eiffel Tower in Paris was completed in 1889.",
    "Berlin is the capital of Germany.",
    "France is a country in Western Europe.",
    "Mount Everest is the highest mountain on Earth.",
    "The Louvre in Paris is the world's most visited museum.",
    "Python is a programming language.",
    "The Seine river flows through Paris.",
    "Tokyo is the capital of Japan.",
]


@pytest.fixture
def ten_node_case():
    return LLMTestCase(
        input="What is the capital of France and when was the Eiffel Tower completed?",
        actual_output="Paris is the capital of France. The Eiffel Tower was completed in 1889.",
        expected_output="The capital of France is Paris. The Eiffel Tower was completed in 1889.",
        retrieval_context=TEN_NODES,
    )


# ---------------------------------------------------------------------------------------------- PostgreSQL server
@pytest.fixture(scope="session")
def pg_url():
    """The URL of a PostgreSQL server for the whole session: ``CONTEXTJUDGE_TEST_PG_URL`` when set, else a
    throwaway cluster (``throwaway_pg.ThrowawayPostgres``) started on loopback and removed at the end. Skips, with
    the reason, where no server can start (no psycopg, no PostgreSQL, initdb or the server failing)."""
    url = os.environ.get("CONTEXTJUDGE_TEST_PG_URL")
    if url:
        yield url
        return
    with ThrowawayPostgres(fsync=False) as pg:
        if pg.url is None:
            pytest.skip(pg.why)
        yield pg.url


def wipe_store(s) -> None:
    """Delete every row of every contextjudge table (the schema version row kept): a clean store on the shared
    cluster for the next test."""
    from contextjudge.store import _schema as S

    with s.engine.begin() as conn:
        for t in reversed(S.metadata.sorted_tables):
            if t.name != "cj_meta":
                conn.execute(t.delete())


@pytest.fixture
def wipe():
    """``wipe_store`` for a test (importing ``conftest`` by name would shadow the integrations' own conftest)."""
    return wipe_store


@pytest.fixture
def pg_store(pg_url):
    """A store on the session's PostgreSQL server, emptied first, closed after the test."""
    from contextjudge.store import open_store

    s = open_store(pg_url)
    wipe_store(s)
    yield s
    s.close()
