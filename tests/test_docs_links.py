"""Every relative link of the user docs resolves: the file exists and, for a `#anchor`, a heading makes that anchor.

Offline and fast: it reads Markdown files only. The anchors are GitHub's: a heading in lower case, punctuation other
than `-` and `_` dropped, spaces turned into `-`, and `-1`, `-2` ... added to repeats. The library's own messages that
send a user to a page (`README.md#what-is-captured`, `docs/judges.md`) are held to the same rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md",
               ROOT / "benchmarks" / "README.md",
               *(ROOT / "docs").glob("*.md"),
               *ROOT.glob("integrations/*/README.md")])
SOURCES = sorted([*(ROOT / "src").rglob("*.py"), *ROOT.glob("integrations/*/src/**/*.py")])

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
MENTION = re.compile(r"\b((?:docs/)?[A-Za-z][\w-]*\.md)(#[\w-]+)?")


def _slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text("utf-8"))):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file, outside code blocks and inline code."""
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text("utf-8")))
    return [a or b for a, b in LINK.findall(text)]


def problem(source: Path, target: str) -> str | None:
    """What is wrong with a link from `source` to `target`, or None when it resolves."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... are not checked offline
        return None
    where, _, anchor = target.partition("#")
    dest = (source.parent / where).resolve() if where else source
    if not dest.exists():
        return f"{target}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading in {dest.name} makes #{anchor}"
    return None


def test_the_anchor_rule_is_githubs():
    assert _slug("In production: sampling, a worker, trends and budgets") == \
        "in-production-sampling-a-worker-trends-and-budgets"
    assert _slug('The embedded judge (`model="local"`)') == "the-embedded-judge-modellocal"
    assert _slug("Gate CI: `contextjudge eval` and pytest") == "gate-ci-contextjudge-eval-and-pytest"


def test_a_broken_link_is_found(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A section\n\n[ok](#a-section) [bad](#nowhere) [gone](missing.md) "
                    "`[code](ignored.md)`\n\n```\n[fenced](ignored.md)\n```\n", "utf-8")
    found = [p for t in links(page) if (p := problem(page, t))]
    assert len(found) == 2 and "#nowhere" in found[0] and "missing.md" in found[1]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_relative_link_resolves(doc: Path):
    broken = [p for target in links(doc) if (p := problem(doc, target))]
    assert not broken, f"{doc.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_the_pages_the_library_names_exist():
    """A message or docstring that sends the user to README.md#anchor or docs/page.md names something that is there."""
    broken = []
    for source in SOURCES:
        for name, anchor in MENTION.findall(source.read_text("utf-8")):
            if name != "README.md" and not name.startswith("docs/"):
                continue
            target = ROOT / name
            if not target.exists():
                broken.append(f"{source.relative_to(ROOT)}: {name} does not exist")
            elif anchor and anchor[1:] not in anchors(target):
                broken.append(f"{source.relative_to(ROOT)}: {name}{anchor} is no heading")
    assert not broken, "\n".join(broken)
