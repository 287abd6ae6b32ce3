"""The agent skill (skills/contextjudge/SKILL.md), followed as an assistant would: on the LangChain RAG tutorial's app
and on the LlamaIndex starter's query engine, each put where the skill says an app lives (``myapp.rag:app``).

Everything is read from the skill itself: its front matter, its ``grep`` that finds the app, its goldens, its
instrument lines, and every ``contextjudge`` command of its steps, run as written (in this process, through the CLI's
``main``), in order. A command that the skill gets wrong (a flag that does not exist, a step out of order) fails
here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contextjudge import cli
from contextjudge.store import open_store

SKILL = Path(__file__).resolve().parents[1] / "skills" / "contextjudge" / "SKILL.md"
TEXT = SKILL.read_text("utf-8")

DOCS = [
    "Employees get 25 vacation days per year. Unused days carry over until March.",
    "The parking garage opens at 6am. Visitor parking is on level 2.",
    "Expenses above 500 euros need a manager's approval. Receipts are required.",
    "The cafeteria serves lunch from noon to 2pm.",
]

LANGCHAIN_TUTORIAL = textwrap.dedent('''
    """The LangChain RAG tutorial's app: documents in a vector store, a retriever, a prompt, a chat model."""
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    vector_store = InMemoryVectorStore(BagOfWordsEmbeddings())
    vector_store.add_documents([Document(page_content=d, id=f"doc{{i}}") for i, d in enumerate({docs!r})])
    retriever = vector_store.as_retriever(search_kwargs={{"k": 3}})
    prompt = ChatPromptTemplate.from_template("Answer from the context.\\nContext: {{context}}\\nQuestion: {{question}}")

    def format_docs(docs):
        return "\\n\\n".join(d.page_content for d in docs)

    app = ({{"context": retriever | format_docs, "question": RunnablePassthrough()}} | prompt | ExtractiveChatModel()
           | StrOutputParser())
''')

LLAMAINDEX_STARTER = textwrap.dedent('''
    """The LlamaIndex starter: load a folder of documents, index them, query the index."""
    from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    documents = SimpleDirectoryReader("data").load_data()
    index = VectorStoreIndex.from_documents(documents, embed_model=KeywordEmbedding())
    app = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=3)
''')


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", TEXT, flags=re.S)


def _commands() -> list[str]:
    """Every ``contextjudge`` command of the skill, in the order it gives them: the lines of its bash blocks, its
    inline commands, and the CI workflow's ``run:`` lines."""
    found: list[tuple[int, str]] = []
    for m in re.finditer(r"```bash\n(.*?)```", TEXT, flags=re.S):
        for i, line in enumerate(m.group(1).splitlines()):
            if line.startswith("contextjudge "):
                found.append((m.start() + i, line))
    for m in re.finditer(r"`(contextjudge (?:estimate|runs|compare|export|report) [^`]+)`", TEXT):
        found.append((m.start(), m.group(1)))
    for m in re.finditer(r"- run: (contextjudge [^\n]+)", TEXT):
        found.append((m.start(), m.group(1)))
    return [c for _, c in sorted(found)]


def test_the_skill_has_the_front_matter_assistants_read():
    m = re.match(r"---\nname: (\S+)\ndescription: (.+?)\n---\n", TEXT, flags=re.S)
    assert m, "SKILL.md starts with a front matter of name and description"
    assert m.group(1) == "contextjudge" and len(m.group(2)) <= 1024 and "retriev" in m.group(2)
    for heading in ("## When to use", "## Rules", "## Steps"):
        assert heading in TEXT
    assert "Never change the user's retriever" in TEXT
    assert [c.split()[1] for c in _commands()][:4] == ["estimate", "eval", "eval", "compare"]


def _project(tmp_path: Path, source: str) -> Path:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "rag.py").write_text(source)
    (tmp_path / "data").mkdir()
    for i, d in enumerate(DOCS):
        (tmp_path / "data" / f"doc{i}.txt").write_text(d)
    (tmp_path / "goldens.jsonl").write_text(_blocks("jsonl")[0])
    return tmp_path


@pytest.fixture
def fresh_app(monkeypatch):
    """Forget ``myapp`` between the two projects (both name their app myapp.rag:app, as the skill does)."""
    for name in ("myapp", "myapp.rag"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in ("myapp", "myapp.rag"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("integration, source, instrument", [
    ("contextjudge_langchain", LANGCHAIN_TUTORIAL, 0),
    ("contextjudge_llama_index", LLAMAINDEX_STARTER, 1),
])
def test_following_the_skill_on_a_tutorial_app(tmp_path, monkeypatch, capsys, fresh_app, integration, source,
                                               instrument):
    pytest.importorskip(integration, reason=f"{integration} is not installed")
    project = _project(tmp_path, source.format(docs=DOCS))
    monkeypatch.chdir(project)

    # step 2: the skill's grep finds the app's module
    grep = next(line for block in _blocks("bash") for line in block.splitlines() if line.startswith("grep "))
    found = subprocess.run(["bash", "-c", grep], cwd=project, capture_output=True, text=True, check=False).stdout
    assert "./myapp/rag.py" in found, found

    # steps 4-8: every contextjudge command, as written, in order
    outputs = {}
    for command in _commands():
        argv = shlex.split(command)[1:]
        rc = cli.main(argv)
        out, err = capsys.readouterr()
        assert rc in (0, 1), f"{command}\n{out}\n{err}"
        outputs.setdefault(argv[0], []).append(out)
    assert "Contextual Precision" in outputs["eval"][0]
    compared = outputs["compare"][0]
    assert re.search(r"^Contextual Recall .* 3 ", compared, flags=re.M), compared  # every golden paired
    store = open_store(".contextjudge/results.db", read_only=True)
    try:
        assert {r["run_id"] for r in store.runs()} >= {"baseline", "after-change"}
        assert store.run_info("baseline").cases == len(_blocks("jsonl")[0].splitlines())
    finally:
        store.close()
    assert Path(".contextjudge/baseline.html").is_file() and Path(".contextjudge/after.csv").is_file()
    assert Path("report.html").is_file()  # the CI step's report

    # step 3: the instrument line, as written, captures the app's own calls into the store
    line = _blocks("python")[instrument].strip()
    scope: dict = {}
    exec(line, scope)  # noqa: S102 - the skill's own line
    session = scope["session"]
    from myapp.rag import app

    try:
        if integration == "contextjudge_langchain":
            app.invoke("How many vacation days do employees get?")
        else:
            app.query("How many vacation days do employees get?")
        assert session.flush(timeout=60)
        assert session.results and session.results[0][1].score is not None
    finally:
        if integration == "contextjudge_langchain":
            from contextjudge_langchain import uninstrument
        else:
            from contextjudge_llama_index import uninstrument
        uninstrument()
        session.close()
    store = open_store(".contextjudge/results.db", read_only=True)
    try:
        captured = [r for r in store.runs() if r["run_id"] not in ("baseline", "after-change")]
        assert len(captured) == 1 and captured[0]["cases"] == 1  # the capture's own run, with the one call
    finally:
        store.close()
    json.loads(_blocks("jsonl")[0].splitlines()[0])  # the goldens are JSON lines


INDEX_NAME = re.compile(r"^(contextjudge|contextjudge-langchain|contextjudge-llama-index)(\[[^\]]*\])?$")


@pytest.mark.parametrize("doc", ["skills/contextjudge/SKILL.md", "docs/mcp.md", "integrations/langchain/README.md",
                                 "integrations/llama_index/README.md"])
def test_install_lines_work_before_contextjudge_is_on_the_public_index(doc):
    """Issue 48 item 9: the skill's step 1 (and docs/mcp.md) said ``pip install "contextjudge[local]"``, which the
    public index cannot answer: an assistant following the skill stopped at step 1. Every ``pip install`` of a
    contextjudge distribution installs it from a path (a clone) or from wheels (``--find-links``)."""
    text = (SKILL.parents[2] / doc).read_text("utf-8")
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M))  # the fenced blocks
    lines = [ln.split(" #")[0].strip() for ln in code.splitlines() if "pip install" in ln]
    assert lines, f"{doc} shows no install line"
    for ln in lines:
        words = shlex.split(ln[ln.index("pip install") + len("pip install"):])
        from_index = [w for prev, w in zip(["install", *words[:-1]], words, strict=True) if prev not in ("-e", "--editable")
                      and INDEX_NAME.match(w)]
        assert not from_index or "--find-links" in words or "-f" in words, (
            f"{doc}: {ln!r} installs {from_index} from the public index, where contextjudge is not yet")
