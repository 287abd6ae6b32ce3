"""The ``contextjudge`` command: evaluate an existing app, score deferred captures, report, compare and export.

Every failure the user can fix prints one line that says what to do (no traceback unless ``--debug``). Exit codes:
0 success, 1 a quality gate failed (a metric's mean below its threshold, a pass rate below ``--min-pass-rate``, or a
regression in ``compare``), 2 an error (usage, configuration), 3 some test cases errored (a golden whose app call
raised, a metric that could not run on a case) and ``--allow-errors`` was not given.
Integrations add subcommands through the entry-point group ``contextjudge.commands`` (a ``main(argv) -> int``)
and app runners through ``contextjudge.apps`` (an ``AppAdapter`` instance).

The modules: ``_main`` (``main`` and the parser), ``_shared`` (what every command uses: exit codes, messages, the
shared arguments, stores, the judge line, metric keys, the gate and summary of a scored run), and one module per
command group, each registering its own subcommands: ``_eval`` (``eval``), ``_score`` (``score``), ``_runs``
(``report``, ``compare``, ``export``, ``runs``), ``_trust`` (``calibrate``, ``label``), ``_estimate``, ``_worker``,
``_trend`` and ``_mcp`` (``mcp``, whose server and tools are ``_mcp_server`` and ``_mcp_tools``). ``_shared`` imports no command module and the command modules import no parser, so the package has
no import circle.
"""

from ._main import main

__all__ = ["main"]
