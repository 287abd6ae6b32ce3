"""Gates that mean what they say (issue 46).

The app: an IT help-desk LlamaIndex query engine (a real ``VectorStoreIndex`` over 16 short documents, an offline
hashing embedding and an extractive LLM), 12 goldens with ``expected_context_ids``, the embedded judge. The k=3 engine
always retrieves the answer document; the k=1 engine loses it for two goldens (the stolen laptop, the malware
warning), where a distractor outranks it. The default gate passes the first and names the two goldens the second
lost, in ``eval --baseline`` and in ``compare --fail-on-regression``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.cli import main
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric, HitRateMetric
from contextjudge.testing import FakeJudge

HELPDESK_APP = textwrap.dedent('''
    from llama_index.core import Document, VectorStoreIndex
    from contextjudge_llama_index.testing import ExtractiveLLM, KeywordEmbedding

    DOCS = {
        "vpn": "VPN access: install the company VPN client and sign in with your single sign-on account.",
        "password": "Password reset: use the self-service portal to reset a forgotten password; it takes five "
                    "minutes.",
        "laptop-order": "Laptop orders: request a new laptop or a laptop upgrade in the hardware portal; a laptop "
                        "arrives in five days.",
        "theft": "Stolen or lost devices: report a stolen device to security within one hour; security locks and "
                 "wipes it remotely.",
        "screen": "Screen problems: a flickering screen or a black screen usually needs a new screen cable from the "
                  "desk.",
        "malware": "Malware alerts: disconnect from the network at once and call the security hotline; do not click "
                   "the alert.",
        "printer": "Printers: add a printer from the print portal; printers on each floor print in black and white.",
        "email": "Email on the phone: install the mail app and sign in; the phone must have a passcode.",
        "wifi": "Guest Wi-Fi: guests join the guest network with the daily code posted at reception.",
        "software": "Software installs: request software in the software catalogue; licensed software needs a "
                    "manager's approval.",
        "mfa": "Two-factor authentication: register the authenticator app; a lost phone is reset by the service "
               "desk.",
        "backup": "Backups: files in your home folder are backed up every night and kept for thirty days.",
        "meeting": "Meeting rooms: book a meeting room in the calendar; rooms have a video screen and a "
                   "speakerphone.",
        "access": "Building badges: a lost badge is replaced at reception; badges open doors on your floor.",
        "storage": "Shared drives: request a shared drive for your team; each shared drive holds 100 gigabytes.",
        "hours": "Service desk hours: the service desk is open from 8am to 6pm on weekdays; call the hotline after "
                 "hours.",
    }
    index = VectorStoreIndex.from_documents([Document(text=t, id_=k) for k, t in DOCS.items()],
                                            embed_model=KeywordEmbedding())
    engine = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=3)
    engine_k1 = index.as_query_engine(llm=ExtractiveLLM(), similarity_top_k=1)
''')

QUESTIONS = [("g1", "How do I connect to the VPN?", "vpn"), ("g2", "I forgot my password", "password"),
             ("g3", "How do I order a new laptop?", "laptop-order"), ("g4", "How do I add a printer?", "printer"),
             ("g5", "How do I get email on my phone?", "email"), ("g6", "What is the guest Wi-Fi code?", "wifi"),
             ("g7", "How do I install new software?", "software"), ("g8", "How long are backups kept?", "backup"),
             ("g9", "How do I book a meeting room?", "meeting"), ("g10", "When is the service desk open?", "hours"),
             ("g11", "My laptop was stolen, what do I do?", "theft"),
             ("g12", "I see a malware warning on my screen", "malware")]


@pytest.fixture
def helpdesk(tmp_path, monkeypatch):
    pytest.importorskip("contextjudge_llama_index")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "helpdesk_app.py").write_text(HELPDESK_APP)
    sys.modules.pop("helpdesk_app", None)
    import helpdesk_app  # noqa: PLC0415

    with open("goldens.jsonl", "w", encoding="utf-8") as fh:
        for gid, question, doc in QUESTIONS:
            answer = helpdesk_app.DOCS[doc].split(": ", 1)[1]
            fh.write(json.dumps({"id": gid, "input": question, "expected_output": answer,
                                 "expected_context_ids": [doc]}) + "\n")
    yield tmp_path
    sys.modules.pop("helpdesk_app", None)


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out


@pytest.mark.slow
def test_the_right_retriever_passes_by_default_and_the_worse_one_fails_naming_the_goldens(helpdesk, capsys):
    common = ["--goldens", "goldens.jsonl", "--model", "local", "--store", "cj.db", "--no-progress"]
    rc, out = _cli(capsys, "eval", "--app", "helpdesk_app:engine", "--run-id", "base", *common)
    assert rc == 0, out
    # the ranking metrics are in the default set (the goldens carry expected ids) and gate
    for name in ("Hit Rate", "MRR", "Recall@K", "NDCG", "Contextual Precision", "Contextual Recall"):
        row = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert "pass: mean >= 0.5" in row, row
    assert next(line for line in out.splitlines() if line.startswith("Hit Rate ")).split()[2] == "1.000"
    # relevancy is shown, not gated, and the summary says why and how to gate it, in one line
    row = next(line for line in out.splitlines() if line.startswith("Contextual Relevancy "))
    assert "not gated" in row and "FAIL" not in row
    (line,) = [ln for ln in out.splitlines() if ln.startswith("not gated: ")]
    assert "Contextual Relevancy" in line and "Faithfulness" in line and "kappa >= 0.6" in line
    assert "--threshold contextual_relevancy=X" in line and "contextjudge calibrate" in line

    rc, out = _cli(capsys, "eval", "--app", "helpdesk_app:engine_k1", "--run-id", "k1", "--baseline", "base",
                   *common)
    assert rc == 1, out
    lost = "2 goldens lost their answer document: g11 'My laptop was stolen, what do I do?', " \
           "g12 'I see a malware warning on my screen'"
    assert lost in out
    assert "k changed: 3.0 -> 1.0 nodes per case" in out
    assert "FAILED: regression against the baseline: 2 golden(s) lost every expected document" in out

    rc, out = _cli(capsys, "compare", "base", "k1", "--store", "cj.db", "--fail-on-regression")
    assert rc == 1, out
    assert lost in out and "(g11, g12)" in out
    # and the k=3 engine against itself is no regression
    rc, out = _cli(capsys, "compare", "base", "base", "--store", "cj.db", "--fail-on-regression")
    assert rc == 0, out
    # a threshold of the user's own makes relevancy gate (its default bar fails the right retriever)
    rc, out = _cli(capsys, "eval", "--app", "helpdesk_app:engine", "--run-id", "base2", *common,
                   "--threshold", "contextual_relevancy=0.5")
    assert rc == 1 and "Contextual Relevancy: mean" in out.split("FAILED:")[1], out


# ------------------------------------------------------------------------------------------------ 1. defaults
def test_one_default_set_from_what_the_goldens_carry():
    from contextjudge.metrics import default_metric_keys, default_metrics_for

    assert default_metric_keys(expected_ids=True, expected_output=True) == [
        "hit_rate", "mrr", "recall_at_k", "ndcg", "contextual_precision", "contextual_recall",
        "contextual_relevancy", "context_utilization", "faithfulness"]
    assert default_metric_keys() == ["contextual_relevancy", "context_utilization", "faithfulness"]
    goldens = [{"input": "q", "expected_context_ids": ["d1"]}]
    from contextjudge.goldens import load_goldens

    assert default_metrics_for(load_goldens(goldens).items)[:4] == ["hit_rate", "mrr", "recall_at_k", "ndcg"]
    # the worker, capture and the CLI read the same definition
    from contextjudge.capture import CaptureSession
    from contextjudge.engine import DEFAULT_METRIC_KEYS

    assert list(DEFAULT_METRIC_KEYS) == default_metric_keys(expected_output=True, conversations=True)
    session = CaptureSession(model=FakeJudge(), mode="off", max_kept=None, goldens=goldens)
    assert [m.key for m in session.metrics][:4] == ["hit_rate", "mrr", "recall_at_k", "ndcg"]
    session.close()


def test_estimate_defaults_follow_the_goldens(tmp_path, capsys):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"input": "q?", "expected_output": "a.", "expected_context_ids": ["d"]}) + "\n")
    rc, out = _cli(capsys, "estimate", "--goldens", str(path), "--model", "gpt-4o-mini", "--json")
    assert rc == 0
    names = json.dumps(json.loads(out))
    assert "hit_rate" in names or "Hit Rate" in names


def test_trust_of_the_embedded_judge_comes_from_its_calibration_file(tmp_path):
    from contextjudge.judges import resolve_model
    from contextjudge.judges._calibration import CalibratedJudge, Calibration
    from contextjudge.metrics import not_gated, trusted_families

    local = resolve_model("local")
    assert trusted_families(local) == frozenset()
    assert trusted_families(FakeJudge()) is None  # not the embedded judge: trusted like an LLM judge
    assert set(not_gated(["hit_rate", "contextual_precision", "contextual_relevancy", "faithfulness"], local)) == {
        "contextual_relevancy", "faithfulness"}
    cal = Calibration("local", {"sentence_relevance": 0.4, "statement_support.actual_output": 0.5},
                      fitted={"sentence_relevance": {"kappa_after_cv": 0.71},
                              "statement_support.actual_output": {"kappa_after_cv": 0.42}})
    calibrated = CalibratedJudge(judge=local, calibration=cal)
    assert trusted_families(calibrated) == {"sentence_relevance"}
    assert set(not_gated(["contextual_relevancy", "faithfulness"], calibrated)) == {"faithfulness"}
    assert not_gated(["faithfulness"], calibrated, explicit=["faithfulness"]) == {}


# ------------------------------------------------------------------------------------------------ 2. regressions
def test_sign_test_is_exact():
    from contextjudge.stats import sign_test

    assert sign_test(2, 0) == 0.25
    assert sign_test(6, 0) == pytest.approx(1 / 64)
    assert sign_test(0, 3) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(7, 1) == pytest.approx(9 / 256)


def _case(i: int, nodes: list) -> LLMTestCase:
    return LLMTestCase(input=f"question {i}?", actual_output=f"answer {i}", expected_output=f"answer {i}",
                       retrieval_context=nodes, expected_context_ids=[f"doc{i}"], id=f"g{i}",
                       additional_metadata={"golden_id": f"g{i}"})


def _nodes(i: int, k: int, with_answer: bool) -> list:
    from contextjudge.cases.testcase import RetrievedNode

    answer = RetrievedNode(f"USEFUL fact {i}.", id=f"doc{i}")
    others = [RetrievedNode(f"Filler {i}-{j}.", id=f"other{i}-{j}") for j in range(3)]
    return ([answer] if with_answer else []) + others[: k - (1 if with_answer else 0)]


def test_compare_names_a_fewer_nodes_rise_in_relevancy_and_fails_on_the_exact_regressions(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    judge = FakeJudge(rules={"USEFUL": "yes"}, default="no")
    metrics = [HitRateMetric(), ContextualRelevancyMetric(model=judge), ContextualPrecisionMetric(model=judge)]
    base = [_case(i, _nodes(i, 3, True)) for i in range(12)]
    # k=1: ten keep their answer node (relevancy rises from 1/3 to 1), two lose it
    cur = [_case(i, _nodes(i, 1, i < 10)) for i in range(12)]
    evaluate(base, metrics, store=db, run_id="base", show_progress=False)
    evaluate(cur, metrics, store=db, run_id="cur", show_progress=False)
    rc, out = _cli(capsys, "compare", "base", "cur", "--store", db, "--fail-on-regression")
    assert rc == 1, out
    assert "2 goldens lost their answer document: g10 'question 10?', g11 'question 11?'" in out
    row = next(line for line in out.splitlines() if line.startswith("Contextual Relevancy "))
    assert "better" not in row and "higher (k changed: 3.0 -> 1.0 nodes per case)" in row, row
    assert "10/2" in row  # ten goldens up, two down
    # the report's comparison says the same
    rc, _ = _cli(capsys, "report", "cur", "--compare", "base", "--store", db, "-o", str(tmp_path / "cmp.html"))
    page = (tmp_path / "cmp.html").read_text("utf-8")
    assert rc == 0 and "higher (k changed: 3.0 -&gt; 1.0 nodes per case)" in page

    # with no golden losing its document, a drop on precision the sign test finds fails the gate
    worse = [_case(i, list(reversed(_nodes(i, 3, True)))) for i in range(12)]  # the answer ranked last
    evaluate(worse, metrics, store=db, run_id="worse", show_progress=False)
    rc, out = _cli(capsys, "compare", "base", "worse", "--store", db, "--fail-on-regression")
    assert rc == 1, out
    assert "lost their answer document" not in out
    assert "Contextual Precision dropped: worse on 12 golden(s), better on 0" in out


# ------------------------------------------------------------------------------------------------ 3. kappa
def test_kappa_of_one_class_is_not_a_number():
    from contextjudge.stats import one_class

    assert one_class(10, 0, 0, 0) == "only yes labels"
    assert one_class(0, 0, 3, 7) == "only no verdicts"
    assert one_class(3, 1, 1, 3) is None


def test_calibrate_on_only_yes_labels_prints_na_and_never_advises_trust(tmp_path, capsys):
    rows = [{"id": f"c{i}", "input": f"what is fact {i}?", "expected_output": f"Fact {i} is blue.",
             "actual_output": f"Fact {i} is blue.", "retrieval_context": [f"Fact {i} is blue."], "labels": [1]}
            for i in range(30)]
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rc, out = _cli(capsys, "calibrate", "--labels", str(path), "--model", "fake", "--no-save")
    assert rc == 0, out
    assert "n/a (only yes labels)" in out
    advice = out.split("advice:")[1] if "advice:" in out else ""
    assert ": trust (" not in advice
    rc, out = _cli(capsys, "calibrate", "--labels", str(path), "--model", "fake", "--no-save", "--json")
    report = json.loads(out)
    assert all(a["advice"] != "trust" for a in report.get("advice") or [])


def test_judge_check_draws_a_sample_across_families_and_labels(tmp_path):
    from contextjudge.cli._mcp_tools import Tools

    tools = Tools(str(tmp_path / "s.db"))
    got = tools.judge_check(judge="fake", limit=60, show=0)
    fams = got["families"]
    assert {"node_usefulness", "sentence_relevance", "statement_support"} <= set(fams)
    for name in ("node_usefulness", "sentence_relevance"):
        conf = fams[name]["confusion"]
        assert conf["tp"] + conf["fn"] > 0 and conf["fp"] + conf["tn"] > 0, (name, conf)


# ------------------------------------------------------------------------------------------------ 4. first page
def test_the_demos_worst_cases_show_only_what_the_gate_uses(capsys):
    """The demo on the embedded judge: its worst cases never present a relevancy or utilization 0.0 (shown, not
    gated) as the good retriever's failure; it says what the gate uses and what the judge is trusted for."""
    pytest.importorskip("contextjudge_langchain")
    pytest.importorskip("contextjudge.local")
    from contextjudge_langchain.demo import main as demo

    assert demo(["--judge", "local", "--limit", "3"]) == 0
    out = capsys.readouterr().out
    worst = out.split("Worst cases, good retriever", 1)[1].split("\n\n", 1)[0]
    scored = [line.split(";")[0].strip() for line in worst.splitlines() if "; retrieved [" in line]
    assert scored, out
    assert not any(line.startswith(("Contextual Relevancy", "Context Utilization")) for line in scored), worst
    assert "What the gate uses: Contextual Precision, Contextual Recall." in " ".join(out.split())


def test_the_readme_llamaindex_snippet_scores_what_the_gate_uses():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text("utf-8")
    block = text.split("### LlamaIndex: one line", 1)[1].split("```", 2)[1]
    assert "ContextualRelevancyMetric" not in block
    assert "expected_context_ids" in block
