"""Run one documentation snippet as a notebook cell would: top-level ``await`` allowed (Ragas' pages use it)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import sys


def main(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    scope = {"__name__": "__main__", "__file__": path}
    result = eval(code, scope)  # noqa: S307 - our own snippet files, run as a notebook cell
    if inspect.iscoroutine(result):
        asyncio.run(result)


if __name__ == "__main__":
    main(sys.argv[1])
