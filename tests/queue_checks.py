"""A check the queue tests share: a run's cases were each judged and written exactly once."""

from __future__ import annotations


def assert_judged_once(store, rid: str, n: int) -> None:
    """Every one of the ``n`` cases of run ``rid`` has one Contextual Relevancy result, scored and without an error,
    and its queue row is done; nothing is left queued, claimed or skipped."""
    res = store.load_run(rid)
    assert len(res.test_results) == n
    for tr in res.test_results:
        assert [m.name for m in tr.metrics_data] == ["Contextual Relevancy"], tr.test_case.input
        assert tr.metrics_data[0].error is None and tr.metrics_data[0].score is not None
    assert store.queue_counts(rid) == {"queued": 0, "claimed": 0, "expired": 0, "done": n, "skipped": 0}
