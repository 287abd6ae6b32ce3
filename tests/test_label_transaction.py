"""One transaction per label (issue 49): ``give_label`` reads, rewrites, logs and tags a case's labels in one store
transaction that holds the case's labels row, so two writers on the same store (two pages, two processes, a
``label`` import) never lose one another's label; on SQLite and PostgreSQL. And ``add_labels`` escapes text no
store takes (a lone surrogate, NUL) as the stored cases hold it."""

from __future__ import annotations

import threading

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.cases.labels import LABELS_KEY, node_ref, resolve_labels
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am.",
         "Unused vacation days carry over until March."]


def _fill(target: str) -> None:
    case = LLMTestCase(id="c-vacation", input="How many vacation days do I get?", actual_output="25 days.",
                       expected_output="Employees get 25 vacation days per year.", retrieval_context=NODES)
    evaluate([case], [ContextualPrecisionMetric(model=FakeJudge())], store=target, run_id="r1",
             show_progress=False)


def _ref(i: int) -> dict:
    r = node_ref(NODES[i])
    return {"id": r["id"], "hash": r["hash"], "text": NODES[i]}


def _node_labels(store) -> list:
    (tc,) = store.labelled_cases()
    return resolve_labels(tc, tc.additional_metadata[LABELS_KEY])[0]["labels"]


def _interleave(target: str, labelled_before: bool) -> None:
    """Writer A gives a label; while A is between reading the case's labels and writing them, writer B (its own
    store object: its own connections and lock, as another process has) gives another label to the same case. Both
    must be kept, and both logged."""
    _fill(target)
    a, b = open_store(target), open_store(target)
    try:
        if labelled_before:
            a.give_label("c-vacation", "labels", _ref(2), False)
        done = threading.Event()
        errors: list[BaseException] = []

        def give_b() -> None:
            try:
                b.give_label("c-vacation", "labels", _ref(1), False, who="b")
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=give_b, daemon=True)
        real = a._label_writes
        calls = [0]

        def a_between(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 1:  # A has read the case's labels and not written them yet: B gives its label now
                thread.start()
                # B either completes now (nothing held it: it wrote between A's read and A's write) or waits for
                # A's transaction; either way A goes on after this bounded wait
                done.wait(2.0)
            return real(*args, **kwargs)

        a._label_writes = a_between  # type: ignore[method-assign]
        a.give_label("c-vacation", "labels", _ref(0), True, who="a")
        thread.join(60)
        assert not thread.is_alive() and not errors, errors
        assert _node_labels(a) == [True, False, False if labelled_before else None]
        assert sorted(r["who"] or "" for r in a.label_log() if r["value"] is not None) == \
            (["", "a", "b"] if labelled_before else ["a", "b"])
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("labelled_before", [False, True], ids=["first-label", "case-labelled"])
def test_two_writers_giving_labels_to_one_case_at_once_keep_both_sqlite(tmp_path, labelled_before):
    _interleave(str(tmp_path / "res.db"), labelled_before)


@pytest.mark.parametrize("labelled_before", [False, True], ids=["first-label", "case-labelled"])
def test_two_writers_giving_labels_to_one_case_at_once_keep_both_postgres(pg_store, labelled_before):
    _interleave(pg_store.url, labelled_before)


def test_a_label_import_between_a_page_label_read_and_write_is_not_undone(tmp_path):
    """``contextjudge label`` (``add_labels``) replaces a case's labels; a page's label given at the same time is
    applied to what the import left, never written over it with the labels it read before."""
    path = str(tmp_path / "res.db")
    _fill(path)
    page, cli = open_store(path), open_store(path)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (cli.add_labels([{"key": "c-vacation", "labels": [0, 0, 1]}]),
                                              done.set()), daemon=True)
    real = page._label_writes

    def between(*args, **kwargs):
        if not thread.is_alive() and not done.is_set():
            thread.start()
            done.wait(2.0)
        return real(*args, **kwargs)

    page._label_writes = between  # type: ignore[method-assign]
    page.give_label("c-vacation", "labels", _ref(0), True)
    thread.join(60)
    # serialised either way round: the import then the page's label on top, or the page's label then the import
    assert _node_labels(page) in ([True, False, True], [False, False, True])
    page.close()
    cli.close()


def test_a_withdrawn_label_on_a_case_without_labels_leaves_no_row(tmp_path):
    path = str(tmp_path / "res.db")
    _fill(path)
    s = open_store(path)
    s.give_label("c-vacation", "labels", _ref(0), None)
    assert s.export_labels() == [] and s.labelled_cases() == []
    assert [r["value"] for r in s.label_log()] == [None]


def test_add_labels_escapes_a_lone_surrogate_and_nul_as_the_stored_case_holds_them(tmp_path):
    """A case captured with a lone surrogate and a NUL is stored escaped (``\\udce9``, ``\\u0000``); a labels record
    naming it by its raw input, or its nodes by their raw text, matches it (and is not refused by the database)."""
    path = str(tmp_path / "res.db")
    nodes = ["The caf\udce9 opens\x00 at 6.", "The garage opens at 7."]
    case = LLMTestCase(id="k1", input="caf\udce9 open?\x00", actual_output="yes",
                       expected_output="It opens at 6\udce9. Really.", retrieval_context=nodes)
    evaluate([case], [ContextualPrecisionMetric(model=FakeJudge())], store=path, run_id="r1", show_progress=False)
    s = open_store(path)
    matched, unmatched = s.add_labels([{"input": "caf\udce9 open?\x00", "labels": [1, 0]}])
    assert [m.case_keys for m in matched] == [["k1"]] and unmatched == []
    matched, _ = s.add_labels([{"key": "k1", "nodes": [{"text": nodes[0], "labels": True},
                                                        {"text": nodes[1], "labels": False}]}])
    assert matched[0].case_keys == ["k1"]
    (tc,) = s.labelled_cases()
    assert resolve_labels(tc, tc.additional_metadata[LABELS_KEY])[0]["labels"] == [True, False]
    s.add_labels([{"key": "k1", "labels": [0, 1], "retrieval_context": nodes}])
    (tc,) = s.labelled_cases()
    assert resolve_labels(tc, tc.additional_metadata[LABELS_KEY])[0]["labels"] == [False, True]
    # the page's label on a statement with the same characters, and its annotator's name, are logged escaped
    s.give_label("k1", "statement_labels", "It opens at 6\udce9.", True, who="J\udce9r\x00me")
    (row,) = [r for r in s.label_log() if r["field"] == "statement_labels"]
    assert row["item"] == "It opens at 6\\udce9." and row["who"] == "J\\udce9r\\u0000me"


def test_node_labels_are_kept_in_rank_order_whatever_order_they_came_in(tmp_path):
    """A closing page hands its waiting labels over together, and the store takes them in any order: the case's
    labels come out the same (in the case's rank order) either way."""
    path = str(tmp_path / "res.db")
    _fill(path)
    s = open_store(path)
    s.give_label("c-vacation", "labels", _ref(2), True)
    s.give_label("c-vacation", "labels", _ref(0), False)
    s.give_label("c-vacation", "relevance_labels", _ref(1), True)
    (rec,) = s.export_labels()
    assert [n["text"] for n in rec["nodes"]] == NODES
    assert _node_labels(s) == [False, None, True]
