"""The chunks questions are written from (``read_chunks``): the app's own chunks and ids where they can be read (a
LangChain vector store, retriever or Documents; a LlamaIndex index, docstore or nodes; ``StoredNodes``, the nodes a
stored run retrieved), else files and texts cut by the app's splitter, else by ``split_text``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._text import split_sentences
from ...errors import ConfigurationError

if TYPE_CHECKING:
    from ...store import RunReads

_FILE_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".text", ".html", ".htm", ".jsonl", ""}


@dataclass
class Chunk:
    """One piece of a document that questions are written from: its id (the app's own where it has one), text,
    the document it came from, and the next chunk of that document (for questions that need two)."""

    id: str
    text: str
    document: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # "app": the app's own chunk and id; "app splitter": cut here by the app's splitter; "contextjudge": cut here
    origin: str = "app"


@dataclass
class StoredNodes:
    """The nodes a stored run retrieved, as chunks: ``generate(StoredNodes("results.db", run="nightly"))``."""

    store: RunReads
    run: str | None = None


def split_text(text: str, size: int = 1000, overlap: int = 0) -> list[str]:
    """Paragraphs packed into pieces of at most ``size`` characters; a paragraph longer than that is cut between
    sentences (a sentence longer than that, between words). ``overlap`` characters of the previous piece's end lead
    the next piece."""
    if size < 50:
        raise ConfigurationError(f"chunk size {size} is too small to hold a question's answer: use 200 or more.")
    units: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        if not para:
            continue
        if len(para) <= size:
            units.append(para)
            continue
        for sent in split_sentences(para) or [para]:
            while len(sent) > size:
                cut = sent.rfind(" ", 0, size)
                cut = cut if cut > size // 2 else size
                units.append(sent[:cut].strip())
                sent = sent[cut:].strip()
            if sent:
                units.append(sent)
    pieces: list[str] = []
    cur = ""
    for u in units:
        if cur and len(cur) + 1 + len(u) > size:
            pieces.append(cur)
            tail = cur[-overlap:] if overlap else ""
            cur = (tail + " " + u).strip() if tail else u
        else:
            cur = f"{cur}\n\n{u}" if cur else u
    if cur:
        pieces.append(cur)
    return pieces


def _html_text(raw: str) -> str:
    from html.parser import HTMLParser  # noqa: PLC0415

    parts: list[str] = []

    class _P(HTMLParser):
        skip = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in ("script", "style"):
                self.skip += 1
            elif tag in ("p", "div", "br", "li", "h1", "h2", "h3", "h4", "tr", "section"):
                parts.append("\n\n")

        def handle_endtag(self, tag: str) -> None:
            if tag in ("script", "style") and self.skip:
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip:
                parts.append(data)

    _P().feed(raw)
    return "".join(parts)


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _FILE_SUFFIXES
                          and not any(part.startswith(".") for part in f.relative_to(p).parts))
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigurationError(f"document path {str(p)!r} does not exist: check the --docs path.")
    return out


def _split_like_the_app(splitter: Any, text: str, name: str) -> list[str]:
    """``text`` cut by the app's own splitter: a LangChain text splitter (``split_text``), a LlamaIndex node parser
    (``get_nodes_from_documents``), or a function of the text returning its pieces."""
    if hasattr(splitter, "get_nodes_from_documents"):
        from llama_index.core import Document  # noqa: PLC0415

        nodes = splitter.get_nodes_from_documents([Document(text=text, metadata={"file_name": name})])
        pieces = [n.get_content() for n in nodes]
    elif hasattr(splitter, "split_text"):
        pieces = list(splitter.split_text(text))
    elif callable(splitter):
        pieces = list(splitter(text))
    else:
        raise ConfigurationError(f"splitter: a {type(splitter).__name__} cannot cut text; pass your app's LangChain "
                                 "text splitter, LlamaIndex node parser, or a function of a text returning its "
                                 "pieces.")
    if not all(isinstance(x, str) for x in pieces):
        raise ConfigurationError("splitter: it must return the pieces of the text as strings.")
    return [x for x in pieces if x.strip()]


def _file_chunks(path: Path, size: int, root: Path | None, splitter: Any = None) -> list[Chunk]:
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{path}: not UTF-8 text ({exc.reason}); convert it to text first (PDFs: pass "
                                 "the Documents your app's loader makes).") from exc
    name = str(path.relative_to(root)) if root is not None and path.is_relative_to(root) else str(path)
    if path.suffix.lower() in (".html", ".htm"):
        raw = _html_text(raw)
    if path.suffix.lower() == ".jsonl":
        out = []
        for n, line in enumerate(raw.splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigurationError(f"{path}:{n}: not a JSON object ({exc.msg}); a .jsonl document file "
                                             "holds one {\"id\": ..., \"text\": ...} object per line.") from exc
                text = row.get("text") or row.get("page_content") or row.get("content") if isinstance(row, dict) \
                    else None
                if isinstance(text, str) and text.strip():
                    cid = str(row.get("id") or f"{name}:{n}")
                    out.append(Chunk(cid, text.strip(), str(row.get("document") or name),
                                     {k: v for k, v in row.items() if k not in ("text", "id")},
                                     origin="app" if row.get("id") else "contextjudge"))
        return out
    if splitter is not None:
        return [Chunk(f"{name}#{k}", t, name, {"source": name}, origin="app splitter")
                for k, t in enumerate(_split_like_the_app(splitter, raw, name), start=1)]
    return [Chunk(f"{name}#{k}", t, name, {"source": name}, origin="contextjudge")
            for k, t in enumerate(split_text(raw, size), start=1)]


def _lc_document_chunk(doc: Any, k: int) -> Chunk:
    meta = dict(getattr(doc, "metadata", None) or {})
    source = meta.get("source") or meta.get("file_path") or meta.get("file_name")
    cid = getattr(doc, "id", None) or meta.get("id") or meta.get("chunk_id") or f"{source or 'doc'}#{k}"
    return Chunk(str(cid), str(doc.page_content), None if source is None else str(source), meta,
                 origin="app" if getattr(doc, "id", None) or meta.get("id") or meta.get("chunk_id") else "contextjudge")


def _li_node_chunk(node: Any) -> Chunk:
    node = getattr(node, "node", node)  # a NodeWithScore
    meta = dict(getattr(node, "metadata", None) or {})
    text = node.get_content() if hasattr(node, "get_content") else str(getattr(node, "text", ""))
    doc = getattr(node, "ref_doc_id", None) or meta.get("file_name") or meta.get("source")
    return Chunk(str(node.node_id), text, None if doc is None else str(doc), meta)


def _from_store(spec: StoredNodes) -> list[Chunk]:
    from ...store import open_store  # noqa: PLC0415

    store = open_store(spec.store, read_only=True) if isinstance(spec.store, (str, Path)) else spec.store
    run_id = store.resolve_run(spec.run)
    seen: dict[str, Chunk] = {}
    for sc in store.load_cases(run_id):
        for node in getattr(sc.test_case, "retrieval_context", None) or []:
            from ...cases.labels import node_hash  # noqa: PLC0415
            from ...cases.provenance import source_of  # noqa: PLC0415

            doc, _ = source_of(node.metadata)
            cid = node.id or doc or f"node-{node_hash(node.text)[:12]}"
            if cid not in seen and node.text.strip():
                seen[cid] = Chunk(cid, node.text, doc, dict(node.metadata or {}))
    if not seen:
        raise ConfigurationError(f"run {run_id} holds no retrieved nodes to write questions from: pick a run whose "
                                 "cases have a retrieval context.")
    return list(seen.values())


def _looks_like_path(text: str) -> bool:
    """A string is a path when it names an existing file or folder, or reads like one (one line, with a slash or
    a document suffix); else it is text."""
    if "\n" in text or len(text) > 4096:
        return False
    return Path(text).exists() or "/" in text or text.lower().endswith(tuple(s for s in _FILE_SUFFIXES if s))


def read_chunks(sources: Any, *, chunk_size: int = 1000, splitter: Any = None) -> list[Chunk]:
    """The chunks of ``sources``: paths (files or folders), a LangChain vector store / retriever / Documents, a
    LlamaIndex index / docstore / nodes, ``StoredNodes``, ``Chunk``\\ s or plain strings of text, or a list mixing
    them. The app's own chunks and ids are kept; files and texts are cut the way the app cuts them when ``splitter``
    is its splitter (a LangChain text splitter, a LlamaIndex node parser, or a function of a text returning its
    pieces), else with ``split_text`` (``chunk_size`` characters)."""
    items = list(sources) if isinstance(sources, (list, tuple)) else [sources]
    out: list[Chunk] = []
    paths = [Path(x) for x in items if isinstance(x, Path) or (isinstance(x, str) and _looks_like_path(x))]
    for p in _files(paths):
        root = next((Path(x) for x in items if isinstance(x, (str, Path)) and Path(x).is_dir()
                     and p.is_relative_to(Path(x))), None)
        out += _file_chunks(p, chunk_size, root, splitter)
    for k, x in enumerate(items, start=1):
        if isinstance(x, (str, Path)) and (isinstance(x, Path) or Path(x) in paths):
            continue
        if isinstance(x, Chunk):
            out.append(x)
        elif isinstance(x, str):
            pieces = split_text(x, chunk_size) if splitter is None else _split_like_the_app(splitter, x, f"text{k}")
            out += [Chunk(f"text{k}#{j}", t, f"text{k}", origin="contextjudge" if splitter is None else "app splitter")
                    for j, t in enumerate(pieces, start=1)]
        elif isinstance(x, StoredNodes):
            out += _from_store(x)
        elif hasattr(x, "page_content"):  # a LangChain Document
            out.append(_lc_document_chunk(x, k))
        elif hasattr(x, "node_id") or hasattr(getattr(x, "node", None), "node_id"):  # a LlamaIndex node
            out.append(_li_node_chunk(x))
        elif hasattr(x, "docstore"):  # a LlamaIndex index
            out += read_chunks(list(x.docstore.docs.values()), chunk_size=chunk_size, splitter=splitter)
        elif hasattr(x, "docs") and isinstance(getattr(x, "docs", None), dict):  # a LlamaIndex docstore
            out += read_chunks(list(x.docs.values()), chunk_size=chunk_size, splitter=splitter)
        elif hasattr(x, "vectorstore"):  # a LangChain VectorStoreRetriever
            out += read_chunks(x.vectorstore, chunk_size=chunk_size, splitter=splitter)
        elif isinstance(getattr(x, "store", None), dict):  # LangChain's InMemoryVectorStore
            from langchain_core.documents import Document  # noqa: PLC0415

            out += [_lc_document_chunk(Document(id=i, page_content=v["text"], metadata=v.get("metadata") or {}), 0)
                    for i, v in x.store.items()]
        elif hasattr(x, "get_by_ids") and hasattr(x, "similarity_search"):
            raise ConfigurationError(f"cannot list the documents of a {type(x).__name__}: pass the Documents you "
                                     "added to it (or its docstore) instead.")
        elif isinstance(x, Iterable) and not isinstance(x, (bytes, dict)):
            out += read_chunks(list(x), chunk_size=chunk_size, splitter=splitter)
        else:
            raise ConfigurationError(f"cannot read documents from a {type(x).__name__}: pass file paths, LangChain "
                                     "Documents or a vector store, or LlamaIndex nodes or an index.")
    seen: set[str] = set()
    unique = []
    for c in out:
        if c.id not in seen and c.text.strip():
            seen.add(c.id)
            unique.append(c)
    return unique
