"""The ``contextjudge`` command: help, eval (gate), score, report, compare, export, runs, plugin commands, errors.

Most tests call ``main([...])`` in-process (fast); a few run the installed console script in a real process.
A tiny app adapter and a plugin command are registered for real, through a ``.dist-info`` folder with an
``entry_points.txt`` put on ``sys.path``. ``eval`` also runs a real LCEL chain through the LangChain adapter and a
LlamaIndex query engine through the LlamaIndex adapter, when those integrations are installed.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from contextjudge import cli
from contextjudge.cli import _eval, _main, _shared
from contextjudge.store import open_store

TINY_APP = textwrap.dedent('''
    DOCS = {
        "vacation": "Employees get 25 vacation days per year. Unused days carry over until March.",
        "parking": "The parking garage opens at 6am. Visitor parking is on level 2.",
        "expenses": "Expenses above 500 euros need a manager's approval. Receipts are required.",
    }

    class TinyRAG:
        """A RAG app that is neither LangChain nor LlamaIndex: only the tiny adapter runs it."""

        def __init__(self, good=True):
            self.good = good

        def retrieve(self, question):
            words = set(question.lower().replace("?", "").split())
            ranked = sorted(DOCS.values(), key=lambda d: -len(words & set(d.lower().replace(".", "").split())))
            return ranked if self.good else list(reversed(ranked))

        def answer(self, question):
            return self.retrieve(question)[0].split(". ")[0] + "."

    app = TinyRAG()
    weak_app = TinyRAG(good=False)
    not_an_app = object()

    def make_app():
        return TinyRAG()

    class FlakyRAG(TinyRAG):
        """Raises on the parking question, as an app with a bug would."""

        def answer(self, question):
            if "parking" in question:
                raise ValueError("the parking tool timed out")
            return super().answer(question)

    flaky = FlakyRAG()
''')

TINY_ADAPTER = textwrap.dedent('''
    import sys
    from contextjudge import LLMTestCase
    from contextjudge.capture import AppAdapter, CapturedCase

    class TinyAdapter(AppAdapter):
        name = "tiny"

        def matches(self, obj):
            return type(obj).__name__ == "TinyRAG"

        def collect(self, obj, goldens, *, concurrency=4):
            return [CapturedCase(test_case=LLMTestCase(input=g.input, actual_output=obj.answer(g.input),
                                                       expected_output=g.expected_output,
                                                       retrieval_context=obj.retrieve(g.input)),
                                 source="tiny", golden_id=g.id) for g in goldens]

    ADAPTER = TinyAdapter()


    class FlakyAdapter(AppAdapter):
        """The adapter contract of 0.3: reports progress, and a GoldenFailure for a golden whose app call raised."""
        name = "flaky"
        accepts = "FlakyRAG test apps"

        def matches(self, obj):
            return type(obj).__name__ == "FlakyRAG"

        def collect(self, obj, goldens, *, concurrency=4, progress=None):
            from contextjudge.capture import GoldenFailure
            out = []
            for i, g in enumerate(goldens):
                try:
                    answer = obj.answer(g.input)
                    out.append(CapturedCase(test_case=LLMTestCase(input=g.input, actual_output=answer,
                                                                  expected_output=g.expected_output,
                                                                  retrieval_context=obj.retrieve(g.input)),
                                            source="flaky", golden_id=g.id))
                except Exception as exc:
                    out.append(GoldenFailure(g, i, exc))
                if progress is not None:
                    progress()
            return out

    FLAKY = FlakyAdapter()

    def hello(argv):
        print("hello from a plugin", argv)
        return 3
''')

GOLDENS = [
    {"id": "g1", "input": "How many vacation days do employees get?",
     "expected_output": "Employees get 25 vacation days per year. Unused days carry over until March."},
    {"id": "g2", "input": "When does the parking garage open?", "expected_output": "The parking garage opens at 6am."},
    {"id": "g3", "input": "Which expenses need approval?",
     "expected_output": "Expenses above 500 euros need a manager's approval. Receipts are required."},
]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with the app, the goldens, and a registered tiny adapter + plugin command; cwd is that folder."""
    (tmp_path / "tinyrag.py").write_text(TINY_APP)
    (tmp_path / "tinyadapter.py").write_text(TINY_ADAPTER)
    dist = tmp_path / "tinyadapter-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyadapter\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[contextjudge.apps]\ntiny = tinyadapter:ADAPTER\n"
                                           "flaky = tinyadapter:FLAKY\n\n"
                                           "[contextjudge.commands]\nhello = tinyadapter:hello\n")
    (tmp_path / "goldens.jsonl").write_text("".join(json.dumps(g) + "\n" for g in GOLDENS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CONTEXTJUDGE_STORE", raising=False)
    for mod in ("tinyrag", "tinyadapter"):
        sys.modules.pop(mod, None)
    return tmp_path


def run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    assert lines[0].startswith("contextjudge: error: "), err
    return lines[0]


# ---------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["eval", "score", "report", "compare", "export", "runs"])
def test_every_command_has_help(capsys, command):
    rc, out, _ = run(capsys, command, "--help")
    assert rc == 0 and out.startswith(f"usage: contextjudge {command}")


def test_top_level_help_lists_commands_and_plugins(capsys, project):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0
    for name in ("eval", "score", "report", "compare", "export", "demo", "hello"):
        assert f"\n    {name}" in out, name
    assert "(from tinyadapter)" in out


def test_plugin_commands_are_discovered_and_run(capsys, project):
    rc, out, _ = run(capsys, "hello", "--fast", "x")
    assert rc == 3 and "hello from a plugin ['--fast', 'x']" in out


def test_missing_demo_says_what_to_install(capsys, monkeypatch):
    monkeypatch.setattr(_main, "_plugin_commands", lambda: {})
    rc, out, _ = run(capsys, "--help")
    assert "demo" in out and "pip install contextjudge-langchain" in out
    rc, _, err = run(capsys, "demo")
    assert rc == 2
    assert "pip install contextjudge-langchain" in _one_line_error(err)


# ---------------------------------------------------------------------------------------------- eval
def test_eval_scores_stores_reports_and_passes(capsys, project):
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake",
                       "--store", "res.db", "--report", "out/report.html", "--run-id", "good", "--no-progress",
                       "--threshold", "relevancy=0.1")
    assert rc == 0, err
    for name in ("Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization"):
        assert name in out
    assert "pass: mean >= 0.50" in out and "pass: mean >= 0.10" in out and "FAIL" not in out
    assert "3 case(s), 0 with an error" in out
    assert "95% CI" in out and "run good" in out
    assert (project / "out" / "report.html").exists()
    s = open_store("res.db")
    info = s.run_info("good")
    assert info.cases == 3 and info.results == 15  # 5 metrics: faithfulness is in the default set (issue 46)
    assert info.config["app"] == "tinyrag:app" and info.config["adapter"] == "tiny"
    assert info.config["code"]["module_sha256"]
    assert [c.case_key for c in s.load_cases("good")] == ["golden-g1", "golden-g2", "golden-g3"]
    s.close()


def test_eval_gate_fails_below_threshold(capsys, project):
    rc, out, _ = run(capsys, "eval", "--app", "tinyrag:weak_app", "--goldens", "goldens.jsonl", "--model", "fake",
                     "--store", "res.db", "--threshold", "0.9", "--metrics", "precision", "recall", "-q")
    assert rc == 1
    assert "FAILED: Contextual Precision: mean" in out
    rc, out, _ = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake",
                     "--store", "res.db", "--metrics", "contextual_recall", "--min-pass-rate", "0.5", "-q")
    assert rc == 0, out
    rc, out, _ = run(capsys, "eval", "--app", "tinyrag:make_app()", "--goldens", "goldens.jsonl", "--model", "fake",
                     "--store", "res.db", "--metrics", "relevancy", "--min-pass-rate", "relevancy=1.0", "-q")
    assert rc == 1 and "pass rate" in out


def test_eval_resumes_a_run_id(capsys, project):
    args = ["eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake", "--store", "res.db",
            "--run-id", "nightly", "--threshold", "relevancy=0.1", "-q"]
    assert run(capsys, *args)[0] == 0
    asked = open_store("res.db").usage("nightly").calls
    assert asked > 0
    rc, out, _ = run(capsys, *args)
    assert rc == 0
    s = open_store("res.db")
    assert s.usage("nightly").calls == asked  # the second run asked the judge nothing
    assert s.run_info("nightly").results == 15


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("argv, expect", [
    (["--goldens", "missing.jsonl"], "goldens file 'missing.jsonl' does not exist"),
    (["--goldens", "bad.jsonl"], "bad.jsonl:2: not a JSON object"),
    (["--app", "no_such_module:app"], "cannot import module 'no_such_module'"),
    (["--app", "tinyrag:nope"], "module 'tinyrag' has no attribute 'nope'"),
    (["--app", "tinyrag"], "is not module:object"),
    (["--app", "broken:app"], "importing 'broken' for --app raised ZeroDivisionError"),
    (["--app", "tinyrag:not_an_app"], "is a builtins.object, which no installed app adapter runs"),
    (["--metrics", "precision", "bogus_metric"], "unknown metric 'bogus_metric'"),
    (["--threshold", "high"], "--threshold 'high': expected a number"),
    (["--store", "."], "is a directory"),
])
def test_eval_errors_print_one_clear_line(capsys, project, argv, expect):
    (project / "bad.jsonl").write_text(json.dumps(GOLDENS[0]) + "\n{not json\n")
    (project / "broken.py").write_text("app = 1 / 0\n")
    base = {"--app": "tinyrag:app", "--goldens": "goldens.jsonl", "--model": "fake", "--store": "res.db"}
    for k, v in zip(argv[::2], argv[1::2], strict=False):
        base[k] = v
    if argv[0] == "--metrics":
        base.pop("--metrics")
    flat = [x for kv in base.items() for x in kv]
    if argv[0] == "--metrics":
        flat += argv
    rc, _, err = run(capsys, "eval", *flat)
    assert rc == 2
    assert expect in _one_line_error(err)


def test_debug_shows_the_traceback(capsys, project):
    with pytest.raises(_shared.UsageError):
        cli.main(["eval", "--app", "no_such_module:app", "--goldens", "goldens.jsonl", "--debug"])


@pytest.mark.parametrize("argv, expect", [
    (["report", "--store", "nowhere.db"], "no store at 'nowhere.db'"),
    (["report", "missing-run", "--store", "res.db"], "no run 'missing-run'"),
    (["export", "--store", "res.db", "--format", "csv", "-o", "."], "cannot write '.'"),
    (["score", "--store", "res.db", "--run", "r1", "--metrics", "nope"], "unknown metric 'nope'"),
])
def test_store_command_errors_print_one_clear_line(capsys, project, argv, expect):
    assert run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake",
               "--store", "res.db", "--run-id", "r1", "--metrics", "precision", "-q")[0] == 0
    s = open_store("res.db")
    s.save_case("r1", "extra", 9, s.load_cases("r1")[0].test_case.model_copy(update={"id": None}))
    s.close()
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert expect in _one_line_error(err)


def test_argparse_usage_errors_exit_2(capsys):
    rc, _, err = run(capsys, "eval", "--goldens", "x.jsonl")
    assert rc == 2 and "--app" in err


# ---------------------------------------------------------------------------------------------- other commands
def test_report_compare_export_and_runs(capsys, project):
    common = ["--goldens", "goldens.jsonl", "--model", "fake", "--store", "res.db", "--threshold", "relevancy=0.1",
              "-q"]
    assert run(capsys, "eval", "--app", "tinyrag:weak_app", "--run-id", "weak", "--name", "before", *common)[0] == 1
    assert run(capsys, "eval", "--app", "tinyrag:app", "--run-id", "good", *common)[0] == 0

    rc, out, _ = run(capsys, "runs", "--store", "res.db")
    assert rc == 0 and out.index("good") < out.index("weak")

    rc, out, _ = run(capsys, "report", "--store", "res.db", "--compare", "weak", "-o", "cmp.html")
    assert rc == 0 and (project / "cmp.html").exists()
    page = (project / "cmp.html").read_text()
    assert re.search(r"Compared with [^<]*weak", page) and "good" in page  # latest run by default

    rc, out, _ = run(capsys, "compare", "weak", "good", "--store", "res.db")
    assert rc == 0
    assert re.match(r"tinyrag:app \(run good, \d{4}-\d\d-\d\d \d\d:\d\d UTC\) compared with before \(run weak, "
                    r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\)", out.splitlines()[0])  # names, ids and times
    row = next(ln for ln in out.splitlines() if ln.startswith("Contextual Precision"))
    assert "+" in row and "better" in row
    rc, out, _ = run(capsys, "compare", "good", "weak", "--store", "res.db", "--fail-on-regression")
    assert rc == 0, out  # three pairs: the exact sign test cannot tell (p >= 1/8), and no golden carries expected ids
    rc, out, _ = run(capsys, "compare", "good", "weak", "--store", "res.db", "--max-drop", "0.1")
    assert rc == 1 and "FAILED: dropped more than 0.1 on" in out and "Contextual Precision" in out

    rc, out, _ = run(capsys, "export", "good", "--store", "res.db")
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert len(lines) == 3 and lines[0]["run_id"] == "good" and len(lines[0]["metrics"]) == 5
    rc, _, _ = run(capsys, "export", "good", "--store", "res.db", "--format", "csv", "-o", "good.csv")
    rows = list(csv.DictReader(io.StringIO((project / "good.csv").read_text())))
    assert len(rows) == 15 and {r["metric"] for r in rows} >= {"Contextual Precision", "Contextual Recall"}


def test_score_scores_deferred_captures(capsys, project):
    from contextjudge import LLMTestCase
    from contextjudge.capture import CapturedCase, CaptureSession
    from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric

    store = open_store("res.db")
    scorer = CaptureSession(metrics=[ContextualPrecisionMetric(), ContextualRecallMetric()], mode="deferred",
                           store=store, goldens=GOLDENS)
    for g in GOLDENS:
        scorer.submit(CapturedCase(test_case=LLMTestCase(input=g["input"], actual_output="x",
                                                         retrieval_context=["Employees get 25 vacation days."]),
                                   source="test"))
    run_id = scorer.run_id
    store.close()
    rc, out, err = run(capsys, "score", "--store", "res.db", "--model", "fake", "--threshold", "0")
    assert rc == 0, err
    assert "Contextual Precision" in out and "Contextual Recall" in out
    s = open_store("res.db")
    assert s.run_info(run_id).results == 6
    assert s.unscored_cases(run_id) == []
    # the results joined the captured cases (no second copy under other keys) and the deferred run ended
    assert s.run_info(run_id).cases == 3 and s.run_info(run_id).status == "finished"
    rc, out, _ = run(capsys, "score", "--store", "res.db", "--run", run_id, "--model", "fake")
    assert rc == 0 and "nothing to score" in out


def _deferred_run(name: str, goldens: list[dict]) -> str:
    """A deferred capture that names no metrics (``metrics=[]``: decide later), matched to ``goldens``: its run's id."""
    from contextjudge import LLMTestCase
    from contextjudge.capture import CapturedCase, CaptureSession

    store = open_store("res.db")
    session = CaptureSession(metrics=[], mode="deferred", store=store, goldens=goldens, run_name=name)
    nodes = [{"id": "vacation", "text": "Employees get 25 vacation days per year."},
             {"id": "parking", "text": "The parking garage opens at 6am."}]
    for g in goldens:
        session.submit(CapturedCase(test_case=LLMTestCase(input=g["input"], actual_output="Employees get 25 days.",
                                                          retrieval_context=nodes), source="test"))
    session.flush()
    run_id = session.run_id
    store.close()
    return run_id


def _scored_metrics(run_id: str) -> set[str]:
    s = open_store("res.db")
    try:
        return {m.name for t in s.iter_test_results(run_id) for m in t.metrics_data}
    finally:
        s.close()


def test_score_gives_a_run_without_metrics_the_defaults_its_cases_carry(capsys, project):
    """``score`` of a run whose configuration names no metrics uses the default set for what its cases carry, as
    ``eval`` does for its goldens (``metrics.default_metrics_for``): with expected ids, the judge-free ranking
    metrics; without an expected output, no precision or recall. Before, it used the worker's fixed list (precision
    and recall always, never the ranking metrics)."""
    with_ids = [{"id": "g1", "input": "How many vacation days do employees get?",
                 "expected_context_ids": ["vacation"]},
                {"id": "g2", "input": "When does the parking garage open?", "expected_context_ids": ["parking"]}]
    bare = [{"id": g["id"], "input": g["input"]} for g in with_ids]
    ids_run, bare_run = _deferred_run("with-ids", with_ids), _deferred_run("bare", bare)

    rc, out, err = run(capsys, "score", "--store", "res.db", "--run", ids_run, "--model", "fake", "-q")
    assert rc == 0, err
    got = _scored_metrics(ids_run)
    assert {"Hit Rate", "MRR", "Recall@K", "NDCG"} <= got, got
    assert "Hit Rate" in out and "MRR" in out
    assert not {"Contextual Precision", "Contextual Recall"} & got, got  # no expected output
    rc, out, err = run(capsys, "score", "--store", "res.db", "--run", bare_run, "--model", "fake", "-q")
    assert rc == 0, err
    got = _scored_metrics(bare_run)
    assert got == {"Contextual Relevancy", "Context Utilization", "Faithfulness"}, got
    assert "Contextual Precision" not in out and "Contextual Recall" not in out


def test_eval_and_score_take_repeats(capsys, project, monkeypatch):
    """--repeats K reaches evaluate(repeats=K): a sampling judge is asked K times and its self-disagreement is
    printed; a deterministic judge says it was asked once; K must be a whole number >= 1."""
    from contextjudge.testing import FakeJudge

    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake",
                       "--store", "res.db", "--no-progress", "--metrics", "contextual_precision", "--threshold", "0",
                       "--repeats", "3")
    assert rc == 0, err
    assert "judge repeats (k=3): asked once (deterministic): fake-judge" in out
    sampling = FakeJudge(temperature=0.7, sequences={"n1": ["yes", "no", "no"]})
    monkeypatch.setattr(_eval, "_judge", lambda model, quiet=False: sampling)
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--store", "res.db",
                       "--no-progress", "--metrics", "contextual_precision", "--threshold", "0", "--repeats", "3",
                       "--run-id", "sampled")
    assert rc == 0, err
    assert re.search(r"judge repeats \(k=3\): fake-judge disagreed with itself on [1-9]\d* of \d+ item\(s\)", out), out
    assert len(sampling.calls) == 3 * 3  # three cases, one request each, asked three times (no cache)
    for argv in (["eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--repeats", "0"],
                 ["score", "--store", "res.db", "--repeats", "two"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and "--repeats: expected a whole number >= 1" in err


# ---------------------------------------------------------------------------------------------- real processes
def _console_script() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "contextjudge")
    return exe if os.path.exists(exe) else shutil.which("contextjudge") or ""


def test_console_script_error_in_a_real_process(project):
    exe = _console_script()
    if not exe:
        pytest.skip("the contextjudge console script is not installed in this environment")
    bad = subprocess.run([exe, "eval", "--app", "nope_mod:app", "--goldens", "goldens.jsonl"], capture_output=True,
                         text=True, timeout=120, cwd=project)
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("contextjudge: error: cannot import module 'nope_mod'")
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------- real frameworks
LCEL_APP = textwrap.dedent('''
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    DOCS = [
        "Employees get 25 vacation days per year. Unused days carry over until March.",
        "The parking garage opens at 6am. Visitor parking is on level 2.",
        "Expenses above 500 euros need a manager's approval. Receipts are required.",
        "The cafeteria serves lunch from noon to 2pm.",
    ]
    store = InMemoryVectorStore(BagOfWordsEmbeddings())
    store.add_documents([Document(page_content=d, id=f"doc{i}") for i, d in enumerate(DOCS)])
    retriever = store.as_retriever(search_kwargs={"k": 3})
    prompt = ChatPromptTemplate.from_template("Context: {context}\\nQuestion: {question}")

    def fmt(docs):
        return "\\n".join(d.page_content for d in docs)

    chain = {"context": retriever | fmt, "question": RunnablePassthrough()} | prompt | ExtractiveChatModel() \\
        | StrOutputParser()
''')

LLAMA_APP = textwrap.dedent('''
    from llama_index.core import Document, VectorStoreIndex
    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    DOCS = [
        "Employees get 25 vacation days per year. Unused days carry over until March.",
        "The parking garage opens at 6am. Visitor parking is on level 2.",
        "Expenses above 500 euros need a manager's approval. Receipts are required.",
        "The cafeteria serves lunch from noon to 2pm.",
    ]
    index = VectorStoreIndex.from_documents([Document(text=d, id_=f"doc{i}") for i, d in enumerate(DOCS)],
                                            embed_model=KeywordEmbedding())
    engine = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=3)
''')


@pytest.mark.parametrize("framework, source, spec", [
    ("contextjudge_langchain", LCEL_APP, "lcel_app:chain"),
    ("contextjudge_llama_index", LLAMA_APP, "llama_app:engine"),
])
def test_eval_runs_real_langchain_and_llamaindex_apps(capsys, project, framework, source, spec):
    pytest.importorskip(framework, reason=f"{framework} is not installed")
    module = spec.split(":")[0]
    (project / f"{module}.py").write_text(source)
    sys.modules.pop(module, None)
    rc, out, err = run(capsys, "eval", "--app", spec, "--goldens", "goldens.jsonl", "--model", "fake",
                       "--store", "res.db", "--run-id", module, "--report", "r.html", "--no-progress")
    assert rc in (0, 1), err
    assert "Contextual Precision" in out, out + err
    s = open_store("res.db")
    cases = s.load_cases(module)
    assert len(cases) == 3
    assert all(c.test_case.retrieval_context for c in cases)
    assert cases[0].test_case.expected_output == GOLDENS[0]["expected_output"]
    assert s.run_info(module).results == 15
    s.close()


DEMO_APP = textwrap.dedent('''
    from contextjudge_langchain.demo import CONFIGS, build_chain, load_corpus

    docs, goldens, _ = load_corpus()
    weak = build_chain(docs["documents"], CONFIGS[0])
    good = build_chain(docs["documents"], CONFIGS[1])
''')


def _demo_goldens(project):
    from importlib.resources import files

    goldens = json.loads((files("contextjudge") / "data/demo_corpus/goldens.json").read_text("utf-8"))["goldens"]
    path = project / "demo_goldens.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in goldens))
    return path, len(goldens)


def test_eval_on_the_demo_app_and_compare_its_two_retrievers(capsys, project):
    pytest.importorskip("contextjudge_langchain.demo", reason="contextjudge-langchain (the demo) is not installed")
    (project / "demo_app.py").write_text(DEMO_APP)
    sys.modules.pop("demo_app", None)
    goldens, n = _demo_goldens(project)
    common = ["--goldens", str(goldens), "--model", "fake", "--store", "demo.db", "--metrics", "precision",
              "recall", "--no-progress", "-q"]
    for which in ("weak", "good"):
        rc, out, err = run(capsys, "eval", "--app", f"demo_app:{which}", "--run-id", which, *common)
        assert rc == 0, out + err
    s = open_store("demo.db")
    assert s.run_info("good").cases == n and s.run_info("weak").cases == n
    assert s.load_cases("good")[0].case_key.startswith("golden-g")  # paired across runs by golden id
    s.close()
    rc, out, _ = run(capsys, "compare", "weak", "good", "--store", "demo.db", "-o", "demo.html")
    assert rc == 0
    row = next(ln for ln in out.splitlines() if ln.startswith("Contextual Precision"))
    assert f" {n} " in row  # every golden paired
    assert re.search(r"Compared with [^<]*weak", (project / "demo.html").read_text())


LLAMA_EXAMPLE_APP = textwrap.dedent('''
    import sys
    sys.path.insert(0, {examples!r})
    from llamaindex_query_engine_eval import build_index
    from contextjudge_llama_index.testing import ExtractiveLLM

    engine = build_index().as_query_engine(llm=ExtractiveLLM(), similarity_top_k=3)
''')


def test_eval_on_the_example_llamaindex_app(capsys, project):
    pytest.importorskip("contextjudge_llama_index", reason="contextjudge-llama-index is not installed")
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    if not os.path.exists(os.path.join(examples, "llamaindex_query_engine_eval.py")):
        pytest.skip("examples/llamaindex_query_engine_eval.py is not in this checkout")
    (project / "llama_example_app.py").write_text(LLAMA_EXAMPLE_APP.format(examples=examples))
    sys.modules.pop("llama_example_app", None)
    goldens, n = _demo_goldens(project)
    rc, out, err = run(capsys, "eval", "--app", "llama_example_app:engine", "--goldens", str(goldens), "--model",
                       "fake", "--store", "li.db", "--run-id", "li", "--report", "li.html", "--no-progress")
    assert rc in (0, 1), err
    s = open_store("li.db")
    cases = s.load_cases("li")
    assert len(cases) == n and all(c.test_case.retrieval_context for c in cases)
    assert s.run_info("li").results == 9 * n  # expected ids: the four ranking metrics join the five judged
    assert (project / "li.html").exists()


# ---------------------------------------------------------------------------------------------- issue 15: the gate
def test_the_default_threshold_gates_the_mean_and_the_table_marks_the_failing_metric(capsys, project):
    common = ["--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "fake", "--store", "res.db",
              "--no-progress"]
    rc, out, _ = run(capsys, "eval", *common)  # no --threshold: each metric's own (0.5) gates
    assert rc == 1
    row = next(ln for ln in out.splitlines() if ln.startswith("Contextual Relevancy"))
    mean = re.search(r"\s(\d\.\d{3})\s", row).group(1)
    assert float(mean) < 0.5 and row.endswith(f"FAIL: mean {mean} < 0.50")  # the comparison the right way round
    assert next(ln for ln in out.splitlines() if ln.startswith("Contextual Precision")).endswith(
        "pass: mean >= 0.50")
    assert f"FAILED: Contextual Relevancy: mean {mean} < 0.50" in out
    assert "mean>=" not in out
    # the user's --threshold is the same rule: a mean at or above it passes
    below = f"{float(mean) - 0.001:.3f}"
    rc, out, _ = run(capsys, "eval", *common, "--threshold", f"relevancy={below}")
    assert rc == 0 and f"pass: mean >= {below}" in out
    rc, out, _ = run(capsys, "eval", *common, "--threshold", "0.9", "--metrics", "relevancy", "-q")
    assert rc == 1 and f"FAIL: mean {mean} < 0.90" in out
    # --min-pass-rate is an extra gate on top of the mean
    rc, out, _ = run(capsys, "eval", *common, "--metrics", "precision", "--min-pass-rate", "1.0", "-q")
    assert rc == 0
    rc, out, _ = run(capsys, "eval", "--app", "tinyrag:flaky", *common[2:], "--metrics", "precision",
                     "--min-pass-rate", "1.0", "--allow-errors", "-q")  # mean 1.0, but a case errored
    assert rc == 1 and "FAILED: Contextual Precision: pass rate 0.667 < 1.00" in out


def test_eval_help_states_the_gate_and_the_exit_codes(capsys):
    rc, out, _ = run(capsys, "eval", "--help")
    text = " ".join(out.split())
    assert rc == 0
    assert "each gated metric's mean must reach its threshold (the metric's default, 0.5, or --threshold)" in text
    assert "--threshold NAME=X of their own, else they are shown and said not gated" in text
    assert "1 a metric's mean is below its threshold" in text and "3 some test cases have an error" in text
    assert "--allow-errors" in text
    rc, out, _ = run(capsys, "--help")
    text = " ".join(out.split())
    assert "Start here: contextjudge demo" in text and "contextjudge eval --app" in text
    assert "no test set yet" in text and "contextjudge goldens generate --docs" in text  # issue 51
    assert "3 some test cases errored" in text
    for command in ("report", "compare"):
        rc, out, _ = run(capsys, command, "--help")
        assert re.search(r"95%\s", out) and "95%%" not in out


def test_a_golden_whose_app_call_raises_is_an_error_case_and_fails_the_run(capsys, project):
    common = ["--app", "tinyrag:flaky", "--goldens", "goldens.jsonl", "--model", "fake", "--store", "res.db",
              "--metrics", "precision", "recall", "--no-progress"]
    rc, out, err = run(capsys, "eval", *common, "--run-id", "flaky")
    assert rc == _shared.EXIT_CASE_ERRORS == 3, out + err
    assert "1 golden(s) failed in the app" in err and "ValueError: the parking tool timed out" in err
    rows = {ln.split("  ")[0]: ln.split() for ln in out.splitlines() if ln.startswith("Contextual")}
    assert rows["Contextual Precision"][-7] == "2" and rows["Contextual Precision"][-6] == "1"  # scored, errors
    assert "3 case(s), 1 with an error" in out
    assert "error on 'When does the parking garage open?'" in out and "the app raised ValueError" in out
    assert "ERRORS: 1 of 3 case(s) have an error" in out
    s = open_store("res.db")
    cases = s.load_cases("flaky")
    assert [c.case_key for c in cases] == ["golden-g1", "golden-g2", "golden-g3"]  # the goldens' order
    res = s.load_run("flaky")
    bad = res.test_results[1].metrics_data
    assert all(m.error_type == "AppError" and "parking tool timed out" in m.error for m in bad)
    assert s.run_info("flaky").config["golden_failures"] == 1
    s.close()
    rc, out, _ = run(capsys, "eval", *common, "--allow-errors", "-q")  # opted out: the scored cases gate
    assert rc == 0 and "ERRORS" not in out and "1 with an error" in out


def test_a_metric_that_cannot_run_is_an_error_that_says_what_to_do(capsys, project):
    goldens = [dict(GOLDENS[0]), {"id": "g2", "input": GOLDENS[1]["input"]}]  # g2 has no expected_output
    (project / "partial.jsonl").write_text("".join(json.dumps(g) + "\n" for g in goldens))
    args = ["eval", "--app", "tinyrag:app", "--goldens", "partial.jsonl", "--model", "fake", "--store", "res.db",
            "--metrics", "precision", "--no-progress"]
    rc, out, _ = run(capsys, *args)
    assert rc == 3
    assert "2 case(s), 1 with an error" in out
    assert "Contextual Precision needs an expected_output, and no golden matched this input" in " ".join(out.split())
    rc, _, _ = run(capsys, *args, "--allow-errors")
    assert rc == 0


def test_an_app_no_adapter_runs_names_its_type_and_what_each_adapter_accepts(capsys, project, monkeypatch):
    (project / "odd.py").write_text("class Agent:\n    pass\n\nagent = Agent()\n")
    sys.modules.pop("odd", None)
    args = ["eval", "--app", "odd:agent", "--goldens", "goldens.jsonl", "--model", "fake", "--store", "res.db"]
    rc, _, err = run(capsys, *args)
    line = _one_line_error(err)
    assert rc == 2 and "--app odd:agent is a odd.Agent, which no installed app adapter runs" in line
    assert "flaky: FlakyRAG test apps" in line and "tiny: apps" in line
    import importlib.util

    for module, dist, _, _ in _eval.KNOWN_INTEGRATIONS:  # installed integrations are never "pip install"ed
        if importlib.util.find_spec(module) is not None:
            assert f"pip install {dist}" not in line
    # an integration that is not installed: then, and only then, say what to install
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "contextjudge_llama_index" else real(name, *a))
    rc, _, err = run(capsys, *args)
    line = _one_line_error(err)
    assert "pip install contextjudge-llama-index" in line and "pip install contextjudge-langchain" not in line


def test_a_progress_bar_runs_while_the_app_runs_over_the_goldens(capsys, project, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:flaky", "--goldens", "goldens.jsonl", "--model", "fake",
                       "--store", "res.db", "--metrics", "precision", "--allow-errors")
    assert rc == 0, out + err
    assert "running the app" in err and "3/3" in err  # one step per golden, failed ones included
    assert "scoring" in err


def test_runs_names_the_judge_that_scored_a_deferred_run(capsys, project):
    from contextjudge import LLMTestCase
    from contextjudge.capture import CapturedCase, CaptureSession
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge

    session = CaptureSession([ContextualRelevancyMetric()], model=FakeJudge(model_name="capture-time"),
                             mode="deferred", store="res.db", run_name="prod")
    session.submit(CapturedCase(test_case=LLMTestCase(input="When does the parking garage open?",
                                                      retrieval_context=["The parking garage opens at 6am."])))
    session.close()
    rc, out, err = run(capsys, "score", "--store", "res.db", "--model", "fake", "--threshold", "0", "-q")
    assert rc == 0, out + err
    rc, out, _ = run(capsys, "runs", "--store", "res.db")
    row = next(ln for ln in out.splitlines() if " prod " in ln)
    assert row.rstrip().endswith("fake-judge") and "capture-time" not in row


def test_the_embedded_judge_is_not_shown_as_billable_tokens(capsys, project):
    rc, out, err = run(capsys, "eval", "--app", "tinyrag:app", "--goldens", "goldens.jsonl", "--model", "local",
                       "--store", "res.db", "--metrics", "precision", "--no-progress", "--allow-errors")
    assert rc in (0, 1), out + err
    assert "judge: contextjudge-local, the embedded offline judge (free, no API calls)" in err
    assert "tokens: none billable (embedded judge, free)" in out and "tokens 0" not in out


def test_export_into_a_closed_pipe_ends_quietly(project):
    exe = _console_script()
    if not exe:
        pytest.skip("the contextjudge console script is not installed in this environment")
    from contextjudge import LLMTestCase, evaluate
    from contextjudge.metrics import ContextualRelevancyMetric
    from contextjudge.testing import FakeJudge

    text = "Employees get 25 vacation days per year. " * 20
    cases = [LLMTestCase(input=f"question {i}", retrieval_context=[text, text]) for i in range(300)]
    evaluate(cases, [ContextualRelevancyMetric(model=FakeJudge())], store="big.db", run_id="big",
             show_progress=False)  # far more JSONL than a pipe holds, so the writer meets the closed pipe
    producer = subprocess.Popen([exe, "export", "big", "--store", "big.db"], cwd=project, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-1"], stdin=producer.stdout, capture_output=True, timeout=120, check=True)
    producer.stdout.close()
    err = producer.stderr.read().decode()
    rc = producer.wait(timeout=120)
    assert json.loads(head.stdout.decode())["run_id"] == "big"
    assert rc == 0 and err == "", err  # no BrokenPipeError traceback, no "Exception ignored" line
