"""``contextjudge mcp``: the Model Context Protocol server a coding assistant attaches to (stdio by default,
streamable HTTP on loopback with ``--http``). The server and its tools live in ``_mcp_server`` and ``_mcp_tools``;
this module only registers the command, so the CLI imports the ``mcp`` SDK only when this command runs."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["add_mcp_command", "cmd_mcp"]

_DESCRIPTION = (
    "Serve contextjudge's tools to a coding assistant over the Model Context Protocol: score (one test case), "
    "runs, run_summary, worst_cases, compare_runs, trend, estimate, judge_check, and evaluate_app (runs your app's "
    "goldens; refused unless --allow-app names the module it may run). The tools read only the store given here. "
    "Answers are bounded (--max-tokens per answer; lists carry a cursor for more). Stdio by default (the assistant "
    "starts this command); --http PORT serves streamable HTTP on 127.0.0.1 instead. Needs the SDK: pip install "
    "\"contextjudge[mcp]\". See docs/mcp.md.")


def add_mcp_command(sub: argparse._SubParsersAction) -> None:
    """Register ``mcp``."""
    from ._shared import _common, _store_arg  # noqa: PLC0415

    p = sub.add_parser("mcp", help="an MCP server for coding assistants (stdio, or HTTP on loopback)",
                       description=_DESCRIPTION)
    _store_arg(p)
    p.add_argument("--allow-app", metavar="MODULE[:OBJECT]",
                   help="let evaluate_app run this module's app (e.g. myapp.chain or myapp.chain:rag_chain); "
                        "without it evaluate_app is refused")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="the largest answer, in tokens (about 4 characters each; default 4000)")
    p.add_argument("--http", type=int, default=None, metavar="PORT",
                   help="serve streamable HTTP on --host:PORT (path /mcp) instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="with --http: a loopback address (default 127.0.0.1)")
    _common(p)
    p.set_defaults(func=cmd_mcp)


def loopback_security(host: str, port: int) -> TransportSecuritySettings:
    """The SDK's Host/Origin checks (``TransportSecuritySettings``) for every loopback address: the SDK turns them
    on by itself only for 127.0.0.1, localhost and ::1, so ``--host 127.0.0.2`` answered any Host."""
    from mcp.server.transport_security import TransportSecuritySettings  # noqa: PLC0415

    from ._shared import loopback_names  # noqa: PLC0415

    hosts, origins = loopback_names(host, port)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def cmd_mcp(args: argparse.Namespace) -> int:
    from ._mcp_tools import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS, Tools  # noqa: PLC0415
    from ._shared import EXIT_OK  # noqa: PLC0415

    try:
        from ._mcp_server import build_server  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError(f"`contextjudge mcp` needs the MCP SDK, which is not installed ({exc}): pip install "
                         "\"contextjudge[mcp]\"") from exc
    if args.max_tokens is not None and args.max_tokens < MIN_MAX_TOKENS:
        raise UsageError(f"--max-tokens {args.max_tokens}: pass {MIN_MAX_TOKENS} or more.")
    if args.allow_app is not None:
        module, sep, obj = args.allow_app.partition(":")
        if not module or (sep and not obj) or not all(p.isidentifier() for p in module.split(".")):
            raise UsageError(f"--allow-app {args.allow_app!r}: pass a module (myapp.chain) or module:object "
                             "(myapp.chain:rag_chain).")
    if args.http is not None:
        try:
            loopback = ipaddress.ip_address(args.host).is_loopback
        except ValueError:
            loopback = args.host == "localhost"
        if not loopback:
            raise UsageError(f"--host {args.host}: the MCP server listens on loopback only (127.0.0.1, ::1 or "
                             "localhost); put a proxy with authentication in front to reach it from elsewhere.")
        if not 0 < args.http < 65536:
            raise UsageError(f"--http {args.http}: pass a port from 1 to 65535.")
    from ..store import DEFAULT_STORE_PATH  # noqa: PLC0415

    target = args.store or os.environ.get("CONTEXTJUDGE_STORE") or DEFAULT_STORE_PATH
    tools = Tools(target, allow_app=args.allow_app, max_tokens=args.max_tokens or DEFAULT_MAX_TOKENS)
    server = build_server(tools)
    print(f"contextjudge mcp: store {target}; evaluate_app "
          + (f"allowed for {args.allow_app}" if args.allow_app else "refused (no --allow-app)")
          + (f"; streamable HTTP on http://{args.host}:{args.http}/mcp" if args.http else "; stdio"),
          file=sys.stderr)
    try:
        if args.http is not None:
            server.run("streamable-http", host=args.host, port=args.http,
                       transport_security=loopback_security(args.host, args.http))
        else:
            server.run("stdio")
    finally:
        tools.close()
    return EXIT_OK
