"""The embedded judge (model="local"): every task, exact ids, determinism, caching, no network, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from langchain_core.messages import HumanMessage

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, evaluate
from contextjudge.errors import ConfigurationError, JudgeUnavailableError
from contextjudge.judges.local import MODEL_NAME, LocalJudge
from contextjudge.judges.protocol import REQUEST_KEY, Item, JudgeRequest
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
    RubricContextRecallMetric,
    TurnContextualPrecisionMetric,
    TurnContextualRecallMetric,
    TurnContextualRelevancyMetric,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")
pytest.importorskip("tokenizers", reason="the embedded judge needs 'tokenizers' (pip install 'contextjudge[local]')")


NODES = ["Paris is the capital of France. It is on the Seine.", "Bananas are yellow. Monkeys like them.",
         "The Eiffel Tower in Paris was completed in 1889."]
QUESTION = "What is the capital of France?"


def _ask(judge: LocalJudge, req: JudgeRequest) -> dict:
    msg = judge.invoke([HumanMessage("(prompt)", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    return json.loads(msg.content)


def _requests() -> list[JudgeRequest]:
    nodes = [Item(id=f"n{k}", text=t) for k, t in enumerate(NODES, 1)]
    sents = [Item(id="n1.s1", text="Paris is the capital of France.", parent="n1"),
             Item(id="n1.s2", text="It is on the Seine.", parent="n1"),
             Item(id="n2.s1", text="Bananas are yellow.", parent="n2")]
    return [
        JudgeRequest(task="node_usefulness", input=QUESTION, reference="Paris", reference_kind="expected_output",
                     items=nodes),
        JudgeRequest(task="node_usefulness", input=QUESTION, items=nodes,
                     history=[{"role": "user", "content": "Tell me about France."},
                              {"role": "assistant", "content": "France is in Europe."}]),
        JudgeRequest(task="statement_support", input=QUESTION, reference="Paris is the capital. Monkeys fly.",
                     items=[Item(id="s1", text="Paris is the capital of France."), Item(id="s2", text="Monkeys fly.")],
                     context=nodes),
        JudgeRequest(task="sentence_relevance", input=QUESTION, items=sents),
        JudgeRequest(task="rubric_recall", input=QUESTION, answer="Paris.", reference="The capital is Paris.",
                     context=nodes),
    ]


@pytest.mark.parametrize("req", _requests(), ids=lambda r: r.task)
def test_answers_every_task_with_exactly_the_ids(req):
    ans = _ask(LocalJudge(), req)
    if req.task == "rubric_recall":
        assert 0.0 <= ans["score"] <= 1.0 and ans["reason"]
        return
    assert [v["id"] for v in ans["verdicts"]] == [it.id for it in req.items]
    for v in ans["verdicts"]:
        assert v["verdict"] in ("yes", "no")
        assert 0.0 <= v["confidence"] <= 1.0
        assert (v["confidence"] >= 0.5) == (v["verdict"] == "yes")
        assert v["reason"]
        if req.task == "statement_support":
            assert set(v["node_ids"]) <= {c.id for c in req.context}


def test_evidence_points_the_right_way():
    judge = LocalJudge()
    nodes, _, support, _, _ = _requests()
    v = {x["id"]: x for x in _ask(judge, nodes)["verdicts"]}
    assert v["n1"]["confidence"] > v["n2"]["confidence"]
    assert v["n1"]["verdict"] == "yes" and v["n2"]["verdict"] == "no"
    assert "Paris is the capital of France" in v["n1"]["reason"]  # the reason quotes what it read
    s = {x["id"]: x for x in _ask(judge, support)["verdicts"]}
    assert s["s1"]["confidence"] > s["s2"]["confidence"]
    assert s["s1"]["verdict"] == "yes" and "n1" in s["s1"]["node_ids"]


def test_deterministic_within_a_process():
    for req in _requests():
        assert _ask(LocalJudge(), req) == _ask(LocalJudge(), req)


def test_message_without_a_request_gets_a_plain_answer():
    msg = LocalJudge().invoke("Is this relevant?")
    assert "only answers contextjudge judge requests" in msg.content
    assert msg.usage_metadata["total_tokens"] > 0


def test_native_flag_usage_and_identity():
    judge = LocalJudge()
    assert LocalJudge.contextjudge_native is True
    params = judge._identifying_params
    assert params["judge"] == "contextjudge-local" and params["encoder"] == MODEL_NAME and len(params["weights"]) == 12
    msg = judge.invoke([HumanMessage("p", additional_kwargs={REQUEST_KEY: _requests()[0].model_dump()})])
    assert msg.usage_metadata["input_tokens"] > 0 and msg.usage_metadata["output_tokens"] > 0


async def test_async_path_matches_sync():
    judge = LocalJudge()
    req = _requests()[0]
    msg = await judge.ainvoke([HumanMessage("p", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    assert json.loads(msg.content) == _ask(judge, req)


def test_each_pair_is_read_once_across_metrics():
    judge = LocalJudge()
    case = LLMTestCase(input="Which river runs through Lyon?", actual_output="The Rhone.",
                       expected_output="The Rhone.", retrieval_context=["Lyon lies where the Rhone meets the Saone."])
    metrics = [ContextualPrecisionMetric(model=judge), ContextUtilizationMetric(model=judge)]
    before = judge.pair_cache.computed
    evaluate([case], metrics, show_progress=False, raise_exceptions=True)
    # precision (expected output) and utilization (actual output) ask the same pair: the model reads it once
    assert judge.pair_cache.computed - before == 1
    evaluate([case], metrics, show_progress=False, raise_exceptions=True)
    assert judge.pair_cache.computed - before == 1


def test_passing_the_removed_embeddings_option_says_what_to_do():
    with pytest.raises(ConfigurationError, match="cross-encoder"):
        LocalJudge(embeddings=object())


def test_long_node_is_read_in_windows_and_the_reason_quotes_the_best_one():
    filler = " ".join(f"The committee met on day {i} to discuss the budget of the parks department." for i in range(40))
    node = filler + " The public library opens at 9 am on Saturdays and closes at 5 pm. " + filler
    req = JudgeRequest(task="node_usefulness", input="When does the library open on Saturdays?",
                       items=[Item(id="n1", text=node), Item(id="n2", text=filler)])
    v = {x["id"]: x for x in _ask(LocalJudge(), req)["verdicts"]}
    assert v["n1"]["verdict"] == "yes" and v["n2"]["verdict"] == "no"
    assert "opens at 9 am" in v["n1"]["reason"] and "read)" in v["n1"]["reason"]


def test_drives_every_metric_end_to_end():
    judge = LocalJudge()
    case = LLMTestCase(input=QUESTION, actual_output="Paris is the capital of France.",
                       expected_output="The capital of France is Paris.", retrieval_context=NODES)
    conv = ConversationalTestCase(turns=[
        Turn(role="user", content="Tell me about France."),
        Turn(role="assistant", content="France is in Europe.", retrieval_context=NODES[:1]),
        Turn(role="user", content="What is its capital?"),
        Turn(role="assistant", content="Paris.", retrieval_context=NODES, expected_output="Paris is the capital."),
    ], expected_outcome="The user learns that Paris is the capital.")
    single = [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
              ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge),
              RubricContextRecallMetric(model=judge)]
    turn = [TurnContextualPrecisionMetric(model=judge), TurnContextualRecallMetric(model=judge),
            TurnContextualRelevancyMetric(model=judge)]
    res = evaluate([case], single, show_progress=False, raise_exceptions=True)
    res_t = evaluate([conv], turn, show_progress=False, raise_exceptions=True)
    for m in [*res.test_results[0].metrics_data, *res_t.test_results[0].metrics_data]:
        assert m.error is None, (m.name, m.error)
        assert m.score is not None and 0.0 <= m.score <= 1.0
    prec = res.test_results[0].metric(single[0].name)
    assert all(v["confidence"] is not None for v in prec.verdicts)


def test_missing_tokenizers_says_how_to_install(monkeypatch):
    monkeypatch.setattr("contextjudge.judges.local._judge._DEFAULT", {})  # no model loaded by an earlier test
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes "import tokenizers" raise ImportError
    with pytest.raises(JudgeUnavailableError, match=r"pip install"):
        LocalJudge()


def test_a_broken_model_file_says_how_to_reinstall(monkeypatch, tmp_path):
    bad = tmp_path / "crossjudge.npz"
    bad.write_bytes(b"not a model at all")
    monkeypatch.setattr("contextjudge.judges.local._judge._DEFAULT", {})
    monkeypatch.setattr("contextjudge.judges.local._judge.default_model_path", lambda: str(bad))
    with pytest.raises(JudgeUnavailableError, match=r"force-reinstall"):
        LocalJudge()


# -------------------------------------------------------------------------- with the real default model
_PROBE = textwrap.dedent("""
    import json, socket, sys
    sys.path.insert(0, {src!r})
    events = []
    NET = ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
           "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg")
    def hook(event, args):
        # urllib3 (imported by langchain-core) binds a socket to ::1 at import to probe IPv6: loopback, no traffic.
        if event in NET or (event == "socket.bind" and str(args[1][0]) not in ("::1", "127.0.0.1")):
            events.append(f"{{event}} {{args[1:]!r}}"[:200])
    sys.addaudithook(hook)
    from langchain_core.messages import HumanMessage
    from contextjudge.judges.protocol import REQUEST_KEY, Item, JudgeRequest
    from contextjudge.judges.local import LocalJudge
    judge = LocalJudge()
    nodes = [Item(id="n1", text="Paris is the capital of France."), Item(id="n2", text="Bananas are yellow.")]
    reqs = [
        JudgeRequest(task="node_usefulness", input="What is the capital of France?", reference="Paris", items=nodes),
        JudgeRequest(task="statement_support", input="q", items=[Item(id="s1", text="Paris is the capital.")],
                     context=nodes),
        JudgeRequest(task="sentence_relevance", input="What is the capital of France?",
                     items=[Item(id="n1.s1", text="Paris is the capital of France.", parent="n1")]),
        JudgeRequest(task="rubric_recall", input="q", answer="Paris.", reference="Paris is the capital.",
                     context=nodes),
    ]
    out = [judge.invoke([HumanMessage("p", additional_kwargs={{REQUEST_KEY: r.model_dump()}})]).content for r in reqs]
    print(json.dumps({{"answers": out, "socket_events": events}}))
""")


def _probe() -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(src=SRC)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_real_model_no_network_and_identical_across_processes():
    first, second = _probe(), _probe()
    assert first["socket_events"] == [], f"the judge touched the network: {first['socket_events']}"
    assert first["answers"] == second["answers"]
    node = json.loads(first["answers"][0])["verdicts"]
    assert node[0]["verdict"] == "yes" and node[1]["verdict"] == "no"


def test_resolve_model_local_builds_the_embedded_judge():
    from contextjudge import resolve_model

    assert isinstance(resolve_model("local"), LocalJudge)


def test_default_judges_share_one_model_and_cache():
    a, b = LocalJudge(), LocalJudge()
    assert a.pair_cache is b.pair_cache
    req = _requests()[0]
    _ask(a, req)
    before = a.pair_cache.computed
    _ask(b, req)
    assert b.pair_cache.computed == before


def test_batching_does_not_change_a_pair_logit():
    model = LocalJudge()._model
    q = model.query_ids("What is the capital of France?")
    texts = ["Paris is the capital of France.", "Bananas are yellow. " * 20, "x"]
    pairs = [(q, model.windows(t, len(q))[0].ids) for t in texts]
    together = model.logits(pairs)
    for k, p in enumerate(pairs):
        np.testing.assert_allclose(model.logits([p])[0], together[k], atol=1e-4)


def test_lead_phrase_is_what_a_node_is_about():
    from contextjudge.judges.local._lexical import lead_phrase, lead_tokens

    assert lead_phrase("Harvey Lawrence Pekar ( ; October 8, 1939 - July 12, 2010) was an American writer.") == \
        "Harvey Lawrence Pekar"
    assert lead_phrase("Kiss and Tell is a 1945 American comedy film.") == "Kiss and Tell"
    assert lead_tokens("Kiss and Tell is a 1945 American comedy film.") == {"kiss", "tell"}
    assert lead_phrase("no subject marker anywhere in these few words") == ""


def test_pair_cache_merges_concurrent_misses_and_computes_each_key_once():
    import threading
    import time

    from contextjudge.judges.local._cache import BatchCache

    seen: list[str] = []
    calls: list[int] = []

    def slow(keys: list) -> list:
        calls.append(len(keys))
        time.sleep(0.05)  # long enough for the other threads to queue their misses
        seen.extend(keys)
        return [len(k) for k in keys]

    cache = BatchCache(slow)
    texts = [f"text number {i}" for i in range(40)]
    results: dict[int, dict] = {}

    def worker(k: int) -> None:
        results[k] = cache.get_many(texts[k * 4:(k + 1) * 4] + texts[:2])  # each also wants two shared keys

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(texts)  # every key computed exactly once
    assert len(calls) < 10  # queued misses were computed together
    for k, got in results.items():
        assert got == {t: len(t) for t in texts[k * 4:(k + 1) * 4] + texts[:2]}


def test_pair_cache_a_failing_batch_does_not_lose_other_callers_keys():
    import threading
    import time

    from contextjudge.judges.local._cache import BatchCache

    failed = []

    def fails_once(keys: list) -> list:
        time.sleep(0.05)
        if not failed:
            failed.append(1)
            raise RuntimeError("model crashed")
        return [1.0 for _ in keys]

    cache = BatchCache(fails_once)
    outcomes: dict[int, object] = {}

    def worker(k: int) -> None:
        try:
            outcomes[k] = cache.get_many([f"caller {k}"])
        except RuntimeError as exc:
            outcomes[k] = exc

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o for o in outcomes.values() if isinstance(o, RuntimeError)]
    assert len(errors) == 1  # only the caller whose model call failed sees the error
    assert sum(1 for k, o in outcomes.items() if o == {f"caller {k}": 1.0}) == 3


def test_model_without_threadpoolctl_says_so_and_still_works(monkeypatch, caplog):
    from contextjudge.judges.local._encoder import CrossEncoderModel

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # makes "import threadpoolctl" raise ImportError
    with caplog.at_level("WARNING", logger="contextjudge"):
        model = CrossEncoderModel(threads=2)
    assert "pip install" in caplog.text and "threadpoolctl" in caplog.text
    q = model.query_ids("a question")
    assert model.logits([(q, model.windows("a short text", len(q))[0].ids)] * 3).shape == (3, 3)
