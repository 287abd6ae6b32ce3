"""Shared fixtures: a ten-node case, and one throwaway PostgreSQL server for the whole session (``pg_url``; a wiped
store on it: ``pg_store``), used by every module that tests the PostgreSQL backend.

PostgreSQL comes from Debian's postgresql package. Set ``CONTEXTJUDGE_TEST_PG_URL`` to use a server you already run
instead (its contextjudge tables are emptied by ``pg_store``)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile

import pytest

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
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


@pytest.fixture(scope="session")
def pg_url():
    """The URL of a PostgreSQL server for the whole session: ``CONTEXTJUDGE_TEST_PG_URL`` when set, else a
    throwaway cluster this fixture starts on loopback (as the ``postgres`` user when the tests run as root) and
    removes at the end. Skips, with the reason, where no server can start (no psycopg, no PostgreSQL, initdb or
    the server failing)."""
    url = os.environ.get("CONTEXTJUDGE_TEST_PG_URL")
    if url:
        yield url
        return
    try:
        import psycopg  # noqa: F401 - only whether it is installed
    except ImportError:
        pytest.skip("PostgreSQL tests need psycopg: pip install 'contextjudge[postgres]'")
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql), so the PostgreSQL store tests "
                    "cannot run; set CONTEXTJUDGE_TEST_PG_URL to use an existing server")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account the Debian package made
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the PostgreSQL server as")
        prefix = ["runuser", "-u", "postgres", "--"] if shutil.which("runuser") else ["su", "postgres", "-c"]
    data = tempfile.mkdtemp(prefix="contextjudge-pg-")
    if owner is not None:
        os.chown(data, owner.pw_uid, owner.pw_gid)
    os.chmod(data, 0o700)
    port = _free_port()
    log = os.path.join(data, "server.log")

    def run(args: list[str]) -> subprocess.CompletedProcess:
        cmd = prefix + args if prefix[:1] != ["su"] else prefix + [" ".join(args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    init = run([f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
    if init.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be initialised here (initdb: {init.stderr.strip()[:300]})")
    start = run([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
                 f"-h 127.0.0.1 -p {port} -k {data} -F", "start"])
    if start.returncode != 0:
        detail = start.stderr
        if os.path.exists(log):
            with open(log, encoding="utf-8", errors="replace") as fh:
                detail = fh.read()[-300:]
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not start here: {detail.strip()}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        run([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(data, ignore_errors=True)




def wipe_store(s) -> None:
    """Delete every row of every contextjudge table (the schema version row kept): a clean store on the shared
    cluster for the next test."""
    from contextjudge.store import _schema as S

    with s.engine.begin() as conn:
        for t in reversed(S.metadata.sorted_tables):
            if t.name != "cj_meta":
                conn.execute(t.delete())


@pytest.fixture
def pg_store(pg_url):
    """A store on the session's PostgreSQL server, emptied first, closed after the test."""
    from contextjudge.store import open_store

    s = open_store(pg_url)
    wipe_store(s)
    yield s
    s.close()
