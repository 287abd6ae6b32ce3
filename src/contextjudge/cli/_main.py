"""``main`` and the parser of the ``contextjudge`` command. Each command module registers its own subcommands
(``add_*_command(sub)``); this module imports them all, and the plugin commands found under the entry-point group
``contextjudge.commands``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._text import shown
from ..errors import ContextJudgeError, UsageError
from ._estimate import add_estimate_command
from ._eval import add_eval_command
from ._goldens import add_goldens_command
from ._mcp import add_mcp_command
from ._prune import add_prune_command
from ._runs import add_store_commands
from ._score import add_score_command
from ._shared import EXIT_ERROR, EXIT_OK, ShownStdout, _entry_points, _err
from ._traces import add_traces_commands
from ._trend import add_trend_command
from ._trust import add_trust_commands
from ._worker import add_worker_command

__all__ = ["build_parser", "main"]

# who ships the well-known subcommands, so a missing one can say what to install
KNOWN_COMMANDS = {"demo": ("contextjudge-langchain", "the offline end-to-end tour on a LangChain RAG chain")}
PLUGIN_HELP = {"recommend": "which metrics fit your app, from a few questions about it"}


def _plugin_commands() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ep in _entry_points("contextjudge.commands"):
        out.setdefault(ep.name, ep)
    return out


def build_parser(plugins: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand: the built-in ones, then the plugins (``contextjudge.commands``), then the
    well-known ones whose package is not installed (each says what to install)."""
    from .. import __version__  # noqa: PLC0415

    plugins = _plugin_commands() if plugins is None else plugins
    parser = argparse.ArgumentParser(
        prog="contextjudge", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Score the retrieval half of RAG apps: contextual precision, recall, relevancy and utilization.\n"
                    "\n"
                    "Start here:\n"
                    "  contextjudge demo            an offline tour: a bundled RAG app scored, stored and reported\n"
                    "  contextjudge eval --app myapp.chain:rag_chain --goldens goldens.jsonl --report report.html\n"
                    "                               run your goldens through your own app, score, store, report;\n"
                    "                               its exit code gates CI\n"
                    "  contextjudge goldens generate --docs docs/ --model gpt-4o-mini -o goldens.jsonl\n"
                    "                               no test set yet: checked questions from your documents (or\n"
                    "                               `goldens from-store` from captured traffic; docs/goldens.md)\n"
                    "Then: `contextjudge report` (HTML report of the latest run), `contextjudge compare BASELINE`\n"
                    "(did a change help?), `contextjudge runs` (what the store holds).",
        epilog="Exit codes: 0 ok, 1 a quality gate failed, 2 an error, 3 some test cases errored (see "
               "`contextjudge eval --help`).\n`contextjudge COMMAND --help` for details.")
    parser.add_argument("--version", action="version", version=f"contextjudge {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only results")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_eval_command(sub)
    add_score_command(sub)
    add_store_commands(sub)
    add_trust_commands(sub)  # calibrate and label
    add_estimate_command(sub)
    add_worker_command(sub)
    add_trend_command(sub)
    add_mcp_command(sub)
    add_prune_command(sub)
    add_goldens_command(sub)
    add_traces_commands(sub)  # collect, import-traces
    _add_plugin_commands(sub, plugins)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction, plugins: dict[str, Any]) -> None:
    """The plugins' subcommands (their arguments pass through untouched), and the well-known ones not installed."""
    for name, ep in sorted(plugins.items()):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        what = KNOWN_COMMANDS.get(name, ("", ""))[1] or PLUGIN_HELP.get(name, "")
        p = sub.add_parser(name, help=f"{what} (from {dist or ep.value})".strip(), add_help=False,
                           prefix_chars="\0")
        p.add_argument("argv", nargs=argparse.REMAINDER)
        p.set_defaults(func=None, plugin=ep)
    for name, (package, what) in KNOWN_COMMANDS.items():
        if name not in plugins:
            p = sub.add_parser(name, help=f"{what} (not installed: pip install {package})", add_help=False,
                               prefix_chars="\0")
            p.add_argument("argv", nargs=argparse.REMAINDER)
            p.set_defaults(func=None, plugin=None, missing=(name, package))


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so in-process callers that swap it keep working)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record), keep="\n\t")  # a warning may quote stored text

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _configure_logging(debug: bool) -> tuple[logging.Logger, logging.Handler, int]:
    """Show the library's warnings (and debug logs with --debug) on stderr while the command runs."""
    log = logging.getLogger("contextjudge")
    handler = _StderrHandler()
    previous = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if debug else logging.WARNING)
    return log, handler, previous


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``contextjudge`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    log, handler, level = _configure_logging(debug)
    stdout = sys.stdout
    sys.stdout = ShownStdout(stdout)  # stored text is shown, never obeyed
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False)) or debug
        args.quiet = bool(getattr(args, "quiet", False))
        if args.command is None:
            parser.print_help()
            return EXIT_OK
        if getattr(args, "missing", None):
            name, package = args.missing
            _err(f"`contextjudge {name}` is provided by {package}, which is not installed: pip install {package}")
            return EXIT_ERROR
        if getattr(args, "plugin", None) is not None:
            return _run_plugin(args.plugin, args.argv)
        rc = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return rc
    except BrokenPipeError:
        _quiet_stdout()  # `contextjudge export | head`: the reader has what it wanted
        return EXIT_OK
    except SystemExit as exc:  # argparse's own usage errors already printed one line
        code = exc.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_ERROR)
    except KeyboardInterrupt:
        _err("interrupted; a stored run can be resumed with the same --run-id.")
        return 130
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        _err(_explain(exc))
        return EXIT_ERROR
    finally:
        if isinstance(sys.stdout, ShownStdout) and sys.stdout.stream is stdout:
            sys.stdout = stdout
        log.removeHandler(handler)
        log.setLevel(level)


def _quiet_stdout() -> None:
    """Point stdout at the null device, so that Python's own flush at exit does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (an in-process caller's buffer)
        pass


def _explain(exc: BaseException) -> str:
    if isinstance(exc, ContextJudgeError):  # UsageError included: its message says what to fix
        return str(exc)
    return f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)"


def _run_plugin(ep: Any, argv: list[str]) -> int:
    try:
        func: Callable[[list[str]], int] = ep.load()
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"the command {ep.name!r} ({ep.value}) could not be loaded: {type(exc).__name__}: {exc}. "
                         "Reinstall the package that provides it.") from exc
    rc = func(list(argv))
    return int(rc or 0)
