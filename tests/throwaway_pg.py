"""A throwaway PostgreSQL cluster on loopback, for the tests (``conftest.pg_url``) and the benchmarks
(``benchmarks/scale.py``): initdb and pg_ctl from Debian's postgresql package, in a temporary directory, as the
``postgres`` user when run as root; removed on exit. ``url`` is None, with ``why`` saying what to do, when none can
start."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile


def pg_bindir() -> str | None:
    """The directory of the newest installed PostgreSQL's programs, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


class ThrowawayPostgres:
    """``with ThrowawayPostgres(fsync=False) as pg: pg.url``. ``fsync=False`` (the tests) runs the server without
    flushing to disk; the benchmarks keep PostgreSQL's default (on), as a real server runs."""

    def __init__(self, *, fsync: bool = True, prefix: str = "contextjudge-pg-") -> None:
        self.fsync = fsync
        self.prefix = prefix
        self.url: str | None = None
        self.why = ""
        self.data = ""
        self._runas: list[str] = []
        self._bindir: str | None = None

    def _run(self, args: list[str]) -> subprocess.CompletedProcess:
        cmd = self._runas + args if self._runas[:1] != ["su"] else self._runas + [" ".join(args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    def __enter__(self) -> ThrowawayPostgres:  # noqa: PYI034 - Python 3.10 has no typing.Self
        try:
            import psycopg  # noqa: F401 - only whether it is installed
        except ImportError:
            self.why = "PostgreSQL tests need psycopg: pip install 'contextjudge[postgres]'"
            return self
        self._bindir = pg_bindir()
        if self._bindir is None:
            self.why = ("PostgreSQL is not installed (apt-get install -y postgresql); set CONTEXTJUDGE_TEST_PG_URL to "
                        "use an existing server")
            return self
        owner = None
        if os.geteuid() == 0:  # initdb refuses to run as root: use the postgres account the Debian package made
            import pwd  # noqa: PLC0415

            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                self.why = "running as root and there is no 'postgres' user to run the PostgreSQL server as"
                return self
            self._runas = ["runuser", "-u", "postgres", "--"] if shutil.which("runuser") else ["su", "postgres", "-c"]
        self.data = tempfile.mkdtemp(prefix=self.prefix)
        if owner is not None:
            os.chown(self.data, owner.pw_uid, owner.pw_gid)
        os.chmod(self.data, 0o700)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = os.path.join(self.data, "server.log")
        init = self._run([f"{self._bindir}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                          "--no-sync"])
        if init.returncode != 0:
            self.why = f"PostgreSQL could not be initialised here (initdb: {init.stderr.strip()[:300]})"
            return self
        start = self._run([f"{self._bindir}/pg_ctl", "-D", self.data, "-l", log, "-w", "-t", "60", "-o",
                           f"-h 127.0.0.1 -p {port} -k {self.data}" + ("" if self.fsync else " -F"), "start"])
        if start.returncode != 0:
            detail = start.stderr
            if os.path.exists(log):
                with open(log, encoding="utf-8", errors="replace") as fh:
                    detail = fh.read()[-300:]
            self.why = f"PostgreSQL could not start here: {detail.strip()}"
            return self
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.data:
            if self.url:
                self._run([f"{self._bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"])
            shutil.rmtree(self.data, ignore_errors=True)
