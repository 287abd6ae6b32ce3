"""Every Python snippet of README.md and docs/*.md runs as written, each in a fresh interpreter, offline.

A ```python block is a whole program: it runs in its own process (this interpreter, so the one venv the tests use),
from an empty folder, with no API key and the network blocked (``_offline_guard``), and must exit 0. The snippets run
in parallel, a few at a time, once per test session. Beyond the exit code, a snippet's output must not contain what
an offline stand-in says when it found nothing ("I could not find this in the documents"): a first score of 0 that
the text presents as a working example is a broken example.

Markers, HTML comments on the lines right above a block's fence (invisible on GitHub):

- ``<!-- snippet: expect REGEX -->`` (repeatable): the snippet's output must match REGEX (``re.search``, multiline).
  Use it for the first score the text says the snippet shows.
- ``<!-- snippet: fragment -->``: an excerpt that is not a program (it uses names from the surrounding text). It is
  compiled, not run.
- ``<!-- snippet: skip REASON -->``: a program that cannot run offline (it needs an API key or a service). It is
  compiled, not run.

Fragments and skips are counted and listed (``test_the_snippet_markers_are_few_and_well_formed``), and kept few.
A snippet that imports a module that is not installed here (an optional extra: ``mcp``, ``pandas`` ...) is skipped
with the module's name as the reason, never failed, so a page added with its own extra still passes where that
extra is absent. Run just these with ``pytest tests/test_doc_snippets.py``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!--\s*snippet:\s*(\w[\w-]*)\s*(.*?)\s*-->\s*$")
KINDS = ("expect", "fragment", "skip")
MAX_NOT_RUN = 16  # fragments and skips together: a page of excerpts belongs in a docstring, not in the user docs
NOTHING_FOUND = "I could not find this in the documents"
TIMEOUT = 600


@dataclass
class Snippet:
    page: Path
    line: int  # the line of the opening fence, 1-based
    code: str
    markers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def marked(self, kind: str) -> list[str]:
        return [arg for k, arg in self.markers if k == kind]


def snippets(pages: list[Path] = PAGES) -> list[Snippet]:
    """The Python blocks of ``pages``, each with the markers on the lines right above its fence."""
    out = []
    for page in pages:
        text = page.read_text("utf-8")
        lines = text.splitlines()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            markers = []
            i = line - 2
            while i >= 0 and (mm := MARKER.match(lines[i].strip())):
                markers.insert(0, (mm.group(1), mm.group(2)))
                i -= 1
            out.append(Snippet(page, line, m.group(1), markers))
    return out


SNIPPETS = snippets()


def missing_modules(code: str) -> list[str]:
    """The top-level modules ``code`` imports that this interpreter cannot find (an optional extra not installed)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    missing = []
    for name in sorted(names):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("OPENAI_API_KEY", "CONTEXTJUDGE_MODEL", "ANTHROPIC_API_KEY"):
        env.pop(key, None)
    paths = [str(ROOT / "tests"), str(ROOT / "src"), *map(str, ROOT.glob("integrations/*/src"))]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    env["PYTHONWARNINGS"] = "ignore"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_snippet(snippet: Snippet) -> subprocess.CompletedProcess[str]:
    """Run one snippet in a fresh interpreter from an empty folder, with the network blocked."""
    with tempfile.TemporaryDirectory(prefix="cj-snippet-") as folder:
        Path(folder, "snippet.py").write_text(snippet.code, "utf-8")
        return subprocess.run([sys.executable, "-c", "import _offline_guard; import runpy; "
                               "runpy.run_path('snippet.py', run_name='__main__')"],
                              cwd=folder, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)


def _runnable(snippet: Snippet) -> bool:
    return not snippet.marked("fragment") and not snippet.marked("skip") and not missing_modules(snippet.code)


@pytest.fixture(scope="module")
def outputs(request) -> dict[str, subprocess.CompletedProcess[str]]:
    """The runs of the snippets this session selected, done in parallel (a few processes at a time)."""
    wanted = {item.callspec.params["snippet"].id for item in request.session.items
              if getattr(item, "originalname", "") == "test_snippet_runs" and hasattr(item, "callspec")}
    todo = [s for s in SNIPPETS if s.id in wanted and _runnable(s)]
    workers = max(1, min(4, (os.cpu_count() or 2)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip([s.id for s in todo], pool.map(run_snippet, todo), strict=True))


def test_the_docs_have_snippets_and_no_placeholders() -> None:
    assert sum(1 for s in SNIPPETS if s.page.name == "README.md") >= 4
    leftovers = re.findall(r"^[A-Z_]{5,}$", (ROOT / "README.md").read_text("utf-8"), re.M)
    assert not leftovers, f"README placeholders left: {leftovers}"


def test_the_snippet_markers_are_few_and_well_formed(capsys) -> None:
    """Every marker is one of the known kinds (a typo would silently run, or silently not check, a snippet); a
    skip says why; the snippets that are not run are listed, and few."""
    bad = [f"{s.id}: {k}" for s in SNIPPETS for k, _ in s.markers if k not in KINDS]
    assert not bad, f"unknown snippet markers (known: {', '.join(KINDS)}): {bad}"
    assert all(reason for s in SNIPPETS for reason in s.marked("skip")), "a skip marker must give its reason"
    for s in SNIPPETS:
        for pattern in s.marked("expect"):
            re.compile(pattern)
    not_run = [s for s in SNIPPETS if s.marked("fragment") or s.marked("skip")]
    with capsys.disabled():
        print(f"\n{len(SNIPPETS)} doc snippets; not run ({len(not_run)}): "
              + ", ".join(f"{s.id} ({'skip: ' + s.marked('skip')[0] if s.marked('skip') else 'fragment'})"
                          for s in not_run))
    assert len(not_run) <= MAX_NOT_RUN, f"{len(not_run)} snippets are not run (at most {MAX_NOT_RUN})"


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.marked("fragment") or s.marked("skip")],
                         ids=lambda s: s.id)
def test_a_snippet_not_run_still_compiles(snippet: Snippet) -> None:
    compile(snippet.code, snippet.id, "exec")


def test_the_markers_are_read_from_the_lines_above_the_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n<!-- snippet: expect score 1\\.0 -->\n<!-- snippet: expect ok -->\n```python\n"
                    "print('ok')\n```\n\nText.\n<!-- snippet: fragment -->\n\n```python\nx\n```\n"
                    "<!-- snippet: skip needs an API key -->\n```python\nimport no_such_module_cj\n```\n", "utf-8")
    found = snippets([page])
    assert [s.markers for s in found] == [[("expect", "score 1\\.0"), ("expect", "ok")], [],
                                          [("skip", "needs an API key")]]  # a blank line ends the markers
    assert missing_modules(found[2].code) == ["no_such_module_cj"] and missing_modules("import os") == []


@pytest.mark.slow
@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.id)
def test_snippet_runs(snippet: Snippet, outputs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    if snippet.marked("fragment"):
        pytest.skip("marked as a fragment")
    if snippet.marked("skip"):
        pytest.skip(snippet.marked("skip")[0])
    missing = missing_modules(snippet.code)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed here (an optional extra)")
    proc = outputs[snippet.id]
    out = proc.stdout + proc.stderr
    tail = f"\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    if proc.returncode != 0:
        gone = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", proc.stderr)
        if gone and missing_modules(f"import {gone.group(1)}"):
            pytest.skip(f"needs {gone.group(1)}, not installed here (an optional extra)")
        pytest.fail(f"{snippet.id} failed (exit {proc.returncode}):{tail}")
    assert NOTHING_FOUND not in out, f"{snippet.id}: the example's app found nothing to answer from:{tail}"
    for pattern in snippet.marked("expect"):
        assert re.search(pattern, proc.stdout, re.M), f"{snippet.id}: its output does not show {pattern!r}:{tail}"
