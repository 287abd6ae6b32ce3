"""One end user's text never costs another case (issue 48, item 1).

A request whose text holds a lone surrogate (the JSON escape ``"\\udce9"``, which any end user can send) made the
store refuse the whole capture write batch it was in: 40 requests with one bad, 40 cases lost. Now such text is
escaped (``\\udce9``), counted and named, and a batch the database refuses on one row's data is written again case by
case, so only that case is lost, counted and named. Through a real LangChain chain with the handler, on a real
SQLite file and on a throwaway PostgreSQL server."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import text

from contextjudge import LLMTestCase, MetricResult, evaluate
from contextjudge.engine._worker import Worker
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

pytest.importorskip("langchain_core")

BAD = json.loads('"Combien de jours de cong\\udce9 ?"')  # what json.loads makes of an end user's "\udce9"
DOCS = ["Employees get 25 vacation days per year. Unused days carry over until March.",
        "The parking garage opens at 6am. Visitor parking is on level 2."]


def _chain():
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore

    from contextjudge_langchain.testing import BagOfWordsEmbeddings, ExtractiveChatModel

    vs = InMemoryVectorStore(BagOfWordsEmbeddings())
    vs.add_documents([Document(page_content=d, id=f"doc{i}") for i, d in enumerate(DOCS)])
    prompt = ChatPromptTemplate.from_template("Context: {context}\nQuestion: {question}")
    return ({"context": vs.as_retriever(search_kwargs={"k": 2}) | (lambda ds: "\n".join(d.page_content for d in ds)),
             "question": RunnablePassthrough()} | prompt | ExtractiveChatModel() | StrOutputParser())


def _forty(store, bad_at=17, bad=BAD, **kwargs):
    """40 back-to-back requests through a LangChain chain captured in mode "worker", the ``bad_at``-th with
    ``bad`` as its question; every case in one write batch. Returns the session once all is written."""
    from contextjudge_langchain import ContextJudgeCallbackHandler

    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric()], model=FakeJudge(), mode="worker",
                                          store=store, batch=40, handoff_delay=120, **kwargs)
    chain = _chain()
    for i in range(40):
        chain.invoke(bad if i == bad_at else f"How many vacation days do employees get, {i}?",
                     config={"callbacks": [handler]})
    assert handler.flush(60)
    return handler.session


def _check_forty_stored_and_scored(store, session):
    c = session.counters
    assert c["seen"] == 40 and c["written"] == 40 and c["dropped"] == 0 and c["escaped"] == 1
    rid = session.run.id
    assert store.queue_counts(rid)["queued"] == 40
    cases = store.load_cases(rid)
    assert len(cases) == 40
    bad = [sc.test_case for sc in cases if "cong" in sc.test_case.input]
    assert [tc.input for tc in bad] == ["Combien de jours de cong\\udce9 ?"]  # escaped, readable, nothing lost
    assert "input" in bad[0].additional_metadata["escaped_text"]  # provenance.ESCAPED_KEY  # named on the case
    # the worker reads every case back and scores it, the escaped one too
    counts = Worker(store, [ContextualRelevancyMetric()], FakeJudge(), cpus=0, nice=0, poll=0.05).run(once=True)
    assert counts.judged == 40
    res = store.load_run(rid)
    assert len(res.test_results) == 40
    assert all(m.error is None and m.score is not None for tr in res.test_results for m in tr.metrics_data)
    session.close(10)


def test_one_lone_surrogate_in_forty_requests_costs_nothing_on_sqlite(tmp_path, caplog):
    store = open_store(tmp_path / "cj.db")
    with caplog.at_level(logging.WARNING, logger="contextjudge"):
        session = _forty(store)
    assert any("\\udce9" in r.getMessage() and "input" in r.getMessage() for r in caplog.records)
    _check_forty_stored_and_scored(store, session)


def test_one_lone_surrogate_in_forty_requests_costs_nothing_on_postgresql(pg_store):
    _check_forty_stored_and_scored(pg_store, _forty(pg_store))


def test_nul_in_a_request_costs_nothing_on_postgresql(pg_store):
    """PostgreSQL refuses NUL in text: the same end-user fault as a lone surrogate, the same cure."""
    session = _forty(pg_store, bad="Combien de jours de cong\x00 ?")
    assert session.counters["written"] == 40 and session.counters["escaped"] == 1
    assert [sc.test_case.input for sc in pg_store.load_cases(session.run.id) if "cong" in sc.test_case.input] == [
        "Combien de jours de cong\\u0000 ?"]
    session.close(10)


def test_background_capture_judges_and_stores_the_case_with_a_surrogate(tmp_path):
    """In the app's own process: the case is judged (the verdict cache hashed its text) and stored with the rest."""
    from contextjudge_langchain import ContextJudgeCallbackHandler

    store = open_store(tmp_path / "cj.db")
    handler = ContextJudgeCallbackHandler(metrics=[ContextualRelevancyMetric()], model=FakeJudge(), store=store)
    chain = _chain()
    for i in range(10):
        chain.invoke(BAD if i == 3 else f"How many vacation days, {i}?", config={"callbacks": [handler]})
    assert handler.flush(60)
    results = handler.session.results
    assert len(results) == 10 and all(r.error is None and r.score is not None for _c, r in results)
    assert len(store.load_cases(handler.session.run.id)) == 10
    handler.session.close(10)


def test_the_store_escapes_what_any_writer_gives_it(tmp_path):
    """A user's own test case (no capture in between) and a judge's reason quoting it: stored, escaped."""
    store = open_store(tmp_path / "cj.db")
    tc = LLMTestCase(input=BAD, actual_output="25 days\x00", retrieval_context=[BAD, "Office in Lyon."],
                     additional_metadata={"raw": BAD})
    res = evaluate([tc], [ContextualRelevancyMetric(model=FakeJudge())], store=store, show_progress=False)
    assert all(m.error is None for tr in res.test_results for m in tr.metrics_data)
    back = store.load_run(res.run_id).test_results
    assert len(back) == 1
    stored = store.load_cases(res.run_id)[0].test_case
    assert stored.input == "Combien de jours de cong\\udce9 ?" and stored.actual_output == "25 days\\u0000"
    assert stored.retrieval_context[0].text == stored.input and stored.additional_metadata["raw"] == stored.input
    rid = store.begin_run("r2", {})
    store.save_case(rid, "k", 0, LLMTestCase(input=BAD, actual_output="25 days"))
    store.save_result(rid, "k", MetricResult(name="m", score=1.0, threshold=0.5, success=True, reason=f"quoting {BAD}",
                                             verdicts=[{"statement": BAD, "verdict": "yes"}]))
    got = store.load_run(rid).test_results[0].metrics_data[0]
    assert got.reason == "quoting Combien de jours de cong\\udce9 ?" and got.verdicts[0]["statement"] == stored.input


def _refuse_poison_sqlite(store):
    with store.engine.begin() as conn:
        conn.execute(text("CREATE TRIGGER refuse_poison BEFORE INSERT ON cj_cases WHEN NEW.input LIKE '%poison%' "
                          "BEGIN SELECT RAISE(ABORT, 'refused by the test trigger'); END"))


def _check_only_the_refused_case_is_lost(store, session, caplog):
    c = session.counters
    assert c["written"] == 39 and c["dropped"] == 1, c
    assert store.queue_counts(session.run.id)["queued"] == 39
    assert len(store.load_cases(session.run.id)) == 39
    named = [r for r in caplog.records if "refused captured case" in r.getMessage()]
    assert len(named) == 1 and "refused by the test trigger" in named[0].getMessage()
    session.close(10)


def test_a_row_the_database_refuses_costs_only_its_own_case_on_sqlite(tmp_path, caplog):
    store = open_store(tmp_path / "cj.db")
    _refuse_poison_sqlite(store)
    with caplog.at_level(logging.ERROR, logger="contextjudge"):
        session = _forty(store, bad="poison pill question")
    _check_only_the_refused_case_is_lost(store, session, caplog)


def test_a_row_the_database_refuses_costs_only_its_own_case_on_postgresql(pg_store, caplog):
    with pg_store.engine.begin() as conn:
        conn.execute(text("CREATE OR REPLACE FUNCTION cj_test_refuse() RETURNS trigger AS $$ BEGIN "
                          "IF NEW.input LIKE '%poison%' THEN RAISE EXCEPTION 'refused by the test trigger'; END IF; "
                          "RETURN NEW; END $$ LANGUAGE plpgsql"))
        conn.execute(text("CREATE TRIGGER refuse_poison BEFORE INSERT ON cj_cases FOR EACH ROW "
                          "EXECUTE FUNCTION cj_test_refuse()"))
    try:
        with caplog.at_level(logging.ERROR, logger="contextjudge"):
            session = _forty(pg_store, bad="poison pill question")
        _check_only_the_refused_case_is_lost(pg_store, session, caplog)
    finally:
        with pg_store.engine.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS refuse_poison ON cj_cases"))
            conn.execute(text("DROP FUNCTION IF EXISTS cj_test_refuse()"))


def test_a_store_that_is_down_is_not_retried_case_by_case(tmp_path, monkeypatch):
    """A batch that fails on the store itself (locked, unreachable) is not written again forty times."""
    from sqlalchemy.exc import OperationalError

    from contextjudge.errors import StoreError
    from contextjudge.store import _queue

    store = open_store(tmp_path / "cj.db")
    calls = []

    def down(st, built):
        calls.append(len(built))
        try:
            raise OperationalError("INSERT", {}, Exception("database is locked"))
        except OperationalError as exc:
            raise StoreError("could not save queued test cases: database is locked") from exc

    monkeypatch.setattr(_queue, "_insert_cases", down)
    session = _forty(store)
    # each batch tried once (one, unless a loaded machine split the 40 by time), never case by case
    assert sum(calls) == 40 and len(calls) <= 3, calls
    assert session.counters["dropped"] == 40 and session.counters["written"] == 0
    monkeypatch.undo()
    session.close(10)
