"""``contextjudge label --serve``: the labelling page, driven by keyboard in a real headless Chromium (over the
DevTools pipe, as tests/test_report_browser.py), against the real server process on loopback and a real SQLite
store. One browser for the module; each test starts its own server on its own store. The token check is plain
HTTP. The browser tests are marked slow (as tests/test_report_browser.py's) and skipped when no Chromium is
installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_report import _chromium
from test_report_browser import Browser

from contextjudge import LLMTestCase, cli, evaluate
from contextjudge.cli._label_serve import LabelSession, annotator_agreement, calibrate_order
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

REPO = Path(__file__).resolve().parents[1]
NODES = ["Employees get 25 vacation days per year.", "The parking garage opens at 6am.",
         "Unused vacation days carry over until March."]
EVIL = "<script>window.cjPwned = 1</script><img src=x onerror=\"window.cjPwned = 2\"><b>bold?</b>"


def _make_store(path: str) -> str:
    cases = [LLMTestCase(id=f"c{i}", input=f"Question {i}: how many vacation days?", actual_output="25 days.",
                         expected_output="Employees get 25 vacation days per year. The garage opens at 6am.",
                         retrieval_context=NODES) for i in range(5)]
    cases.append(LLMTestCase(id="evil", input=EVIL, actual_output=EVIL, expected_output="Fine. " + EVIL,
                             retrieval_context=[EVIL, NODES[0]]))
    judge = FakeJudge()
    evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
                     ContextualRelevancyMetric(model=judge)], store=path, run_id="r1", show_progress=False)
    return path


class Server:
    """``contextjudge label --serve`` in its own process; ``url`` is what it printed (with the token)."""

    def __init__(self, store: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-m", "contextjudge", "label", "--serve", "--store", store,
                                      "--model", "fake", "--quiet", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.url = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("open "):
                self.url = line.split()[1]
                break
            if not line and self.proc.poll() is not None:
                break
        assert self.url, f"the server printed no address: {self.proc.stderr.read()}"
        self.base, self.token = self.url.split("/?t=")

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no clean shutdown
        self.proc.wait()
        self.proc.stdout.close()
        self.stderr = self.proc.stderr.read()
        self.proc.stderr.close()


@pytest.fixture
def served(tmp_path):
    store = _make_store(str(tmp_path / "labels.db"))
    servers: list[Server] = []

    def start(*args: str) -> Server:
        servers.append(Server(store, *args))
        return servers[-1]

    yield store, start
    for s in servers:
        if s.proc.poll() is None:
            s.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = _chromium()
    if binary is None:
        pytest.skip("no headless Chromium installed (Debian: apt-get install -y chromium); the labelling page is "
                    "then checked only over plain HTTP")
    b = Browser(binary, str(tmp_path_factory.mktemp("profile")))
    yield b
    b.close()


KEYS = {"1": ("Digit1", 49), "2": ("Digit2", 50), "3": ("Digit3", 51), "4": ("Digit4", 52), "j": ("KeyJ", 74),
        "5": ("Digit5", 53), "6": ("Digit6", 54), "k": ("KeyK", 75), "n": ("KeyN", 78), "p": ("KeyP", 80), "u": ("KeyU", 85), "q": ("KeyQ", 81),
        "o": ("KeyO", 79), "Escape": ("Escape", 27)}


def press(b: Browser, *keys: str) -> None:
    for k in keys:
        b.key(k, *KEYS[k])


def settled(b: Browser, saved: int) -> None:
    b.wait_for(f"document.body.getAttribute('data-cj-pending') === '0' && "
               f"document.body.getAttribute('data-cj-saved') === '{saved}'")


def _get(url: str, **headers: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _latest(store: str, key: str) -> dict:
    return next((r for r in open_store(store).export_labels() if r["key"] == key), {})


# ------------------------------------------------------------------------------------------------ plain HTTP
def test_a_request_without_the_token_is_refused_and_writes_nothing(served):
    store, start = served
    s = start()
    assert s.base.startswith("http://127.0.0.1:")
    for path in ("/", "/api/queues", "/api/case?key=c0", "/api/figures"):
        assert _get(s.base + path)[0] == 403
        assert _get(s.base + path + ("&" if "?" in path else "?") + "t=wrong" + s.token[5:])[0] == 403
    body = json.dumps({"key": "c0", "field": "labels", "item": {"hash": "x"}, "value": True}).encode()
    for headers in ({}, {"X-CJ-Token": "nope"}):
        req = urllib.request.Request(s.base + "/api/label", data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 403
    assert open_store(store).label_log() == []
    status, page = _get(s.url)
    assert status == 200 and b"Content-Security-Policy" in page and b"<script" in page
    assert b"http://" not in page.split(b"<script>")[0] and b"https://" not in page  # nothing from elsewhere
    status, _ = _get(s.base + "/api/queues", **{"X-CJ-Token": s.token})
    assert status == 200
    s.kill()
    assert "warning" not in s.stderr  # the default address, this machine only: nothing to warn about


def _post(s: Server, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(s.base + "/api/label", data=json.dumps(body).encode(), method="POST",
                                 headers={"X-CJ-Token": s.token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_answer_statements_are_listed_labelled_supported_and_reach_calibrate_as_faithfulness(served, capsys):
    from contextjudge._text import split_statements

    store, start = served
    s = start()
    case = json.loads(_get(s.base + "/api/case?key=evil", **{"X-CJ-Token": s.token})[1])
    assert [a["text"] for a in case["answer_statements"]] == split_statements(EVIL)  # as faithfulness splits it
    assert all(a["label"] is None for a in case["answer_statements"])
    for key, value in (("c0", True), ("c1", False), ("c2", True), ("c3", False), ("c4", True)):
        (stmt,) = json.loads(_get(s.base + f"/api/case?key={key}", **{"X-CJ-Token": s.token})[1])["answer_statements"]
        assert stmt["text"] == "25 days."
        assert _post(s, {"key": key, "field": "answer_statement_labels", "item": stmt["text"], "value": value,
                         "queue": "estimate", "who": "ann"}) == (200, {"ok": True})
    assert _post(s, {"key": "c4", "field": "answer_statement_labels", "item": "25 days.", "value": None,
                     "queue": "estimate", "who": "ann"})[0] == 200  # undo: withdrawn
    got = _latest(store, "c1")
    assert (got["answer_statements"], got["answer_statement_labels"]) == (["25 days."], [False])
    assert "statement_labels" not in got and "statements" not in got  # the expected output's are another field
    assert "c4" not in {r["key"] for r in open_store(store).export_labels()}
    shown = json.loads(_get(s.base + "/api/case?key=c1", **{"X-CJ-Token": s.token})[1])["answer_statements"]
    assert shown == [{"text": "25 days.", "label": False}]
    log = open_store(store).label_log()
    assert [(r["field"], r["case_key"], r["item"], r["value"]) for r in log][-2:] == [
        ("answer_statement_labels", "c4", "25 days.", True), ("answer_statement_labels", "c4", "25 days.", None)]
    figures = json.loads(_get(s.base + "/api/figures", **{"X-CJ-Token": s.token})[1])
    rc = cli.main(["calibrate", "--store", store, "--model", "fake", "--json", "--no-save", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    fam = "statement_support.actual_output"
    assert report[fam]["items"] == 4
    assert figures["calibrate"][fam] == report[fam]
    assert [a for a in figures["calibrate"]["advice"] if a["metric"] == "Faithfulness"] == \
        [a for a in report["advice"] if a["metric"] == "Faithfulness"] != []


def test_another_loopback_address_is_this_machine_and_checks_host_and_origin(served):
    _, start = served
    s = start("--host", "127.0.0.2")  # still this machine: no warning, and the Host/Origin checks of loopback
    assert s.base.startswith("http://127.0.0.2:")
    port = s.base.rsplit(":", 1)[1]
    status, _ = _get(s.url)
    assert status == 200
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert _get(s.url, Host=host)[0] == 200
    assert _get(s.url, Host=f"evil.example:{port}")[0] == 403  # a DNS-rebinding page
    assert _get(s.url, Origin="http://evil.example")[0] == 403  # another site's page
    assert _get(s.url, Origin=f"http://127.0.0.2:{port}")[0] == 200
    s.kill()
    assert "warning" not in s.stderr


def _raw(s: Server, head: str, body: bytes = b"", *, wait: float = 10.0) -> bytes:
    """One request over a plain socket (what a browser cannot send: a lying Content-Length); the answer, or b""
    when the server closed without one."""
    import socket

    host, port = s.base.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def _wait_read(server_port: int, client_port: int, timeout: float = 30) -> None:
    """Until the server's end of the connection from ``client_port`` has nothing left unread (Linux's
    /proc/net/tcp receive queue), so a reset sent next comes after the request was read, however busy the box."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if int(f[1].split(":")[1], 16) == server_port and int(f[2].split(":")[1], 16) == client_port and \
                    int(f[4].split(":")[1], 16) == 0:
                return
        time.sleep(0.02)
    raise AssertionError("the server never read the request")


def _hold_store(store: str):
    """A second writer holding the SQLite store's write lock (the page's saves wait on it) until ``release()``."""
    import sqlite3

    conn = sqlite3.connect(store, timeout=30, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_a_label_the_case_does_not_have_or_a_body_that_is_not_one_label_is_refused(served):
    store, start = served
    s = start()
    case = json.loads(_get(s.base + "/api/case?key=c0", **{"X-CJ-Token": s.token})[1])
    node = case["nodes"][0]["ref"]
    for body, says in (
            ([{"key": "c0", "field": "labels", "item": node, "value": True}], "send one JSON object"),
            ("c0", "send one JSON object"),
            ({"key": "c0", "field": "labels", "item": {"hash": "0" * 16, "text": "a node of another case"},
              "value": True}, "retrieved no node"),
            ({"key": "c0", "field": "labels", "item": {"id": "doc-of-another-case"}, "value": True},
             "retrieved no node"),
            ({"key": "c0", "field": "statement_labels", "item": "Paris is the capital of France.", "value": True},
             "is not a statement of case 'c0'"),
            ({"key": "c0", "field": "answer_statement_labels", "item": "Employees get 25 vacation days per year.",
              "value": True}, "actual output"),
            ({"key": "c0", "field": "bogus", "item": node, "value": True}, "unknown label field"),
            ({"key": ["c0"], "field": "labels", "item": node, "value": True}, "no case")):
        code, answer = _post(s, body)
        assert (code, says in answer["error"]) == (400, True), (body, answer)
    assert open_store(store).label_log() == [] and open_store(store).export_labels() == []
    assert _post(s, {"key": "c0", "field": "labels", "item": node, "value": True}) == (200, {"ok": True})
    assert _post(s, {"key": "c0", "field": "statement_labels", "item": case["statements"][0]["text"],
                     "value": False}) == (200, {"ok": True})
    assert len(open_store(store).label_log()) == 2


def test_a_lying_content_length_and_a_closed_tab_hold_no_thread_and_print_nothing(served):
    import socket

    store, start = served
    s = start()
    path = f"/api/label?t={s.token}"
    host = s.base.split("//")[1]
    # a Content-Length of 100 MB with a two-byte body: refused at once, unread (it held a thread for good)
    answer = _raw(s, f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100000000", b"{}")
    assert answer.startswith(b"HTTP/1.0 413") and b"at most" in answer
    assert _raw(s, f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: -5", b"{}").startswith(b"HTTP/1.0 400")
    # a tab closed while its label waits on the store: the answer has nobody to go to, and no traceback is printed
    case = json.loads(_get(s.base + "/api/case?key=c1", **{"X-CJ-Token": s.token})[1])
    body = json.dumps({"key": "c1", "field": "labels", "item": case["nodes"][0]["ref"], "value": True}).encode()
    lock = _hold_store(store)
    try:
        h, port = host.rsplit(":", 1)
        sock = socket.create_connection((h, int(port)), timeout=10)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        _wait_read(int(port), sock.getsockname()[1])  # the server has read it and waits on the store
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # a reset, as a closed tab's
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    deadline = time.monotonic() + 30
    while len(open_store(store).label_log()) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(open_store(store).label_log()) == 1  # the label a closed tab sent is kept
    assert _get(s.url)[0] == 200  # and the server answers on
    s.kill()
    assert "Traceback" not in s.stderr and "BrokenPipe" not in s.stderr and "ConnectionReset" not in s.stderr, \
        s.stderr


def test_the_page_cannot_be_framed(served):
    _, start = served
    s = start()
    req = urllib.request.Request(s.url)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    port = s.base.rsplit(":", 1)[1]
    assert _get(s.url, Host=f"evil.example:{port}")[0] == 403


def test_queues_calibrate_nearest_threshold_first_both_signs_and_estimate_is_a_seeded_draw():
    class R:
        def __init__(self, score: float, threshold: float = 0.5, verdicts: list | None = None) -> None:
            self.score, self.threshold, self.verdicts = score, threshold, verdicts or []

    results = {("a", "P"): R(0.9), ("b", "P"): R(0.55), ("c", "P"): R(0.1), ("d", "P"): R(0.45),
               ("e", "P"): R(0.0), ("b", "R"): R(1.0)}
    order = calibrate_order(["a", "b", "c", "d", "e", "f"], results)
    assert order[:2] in (["b", "d"], ["d", "b"])  # nearest the threshold, one pass and one fail
    assert order[-1] == "f"  # never judged: last
    assert sorted(order) == ["a", "b", "c", "d", "e", "f"]
    # jurors that disagree on an item, or a tier that overturned the cheap verdict, come before any near score
    jury = [{"verdict": True, "jurors": {"local": {"verdict": True}, "biased": {"verdict": False}}}]
    results[("c", "P")] = R(0.1, verdicts=jury)
    assert calibrate_order(["a", "b", "c", "d", "e", "f"], results)[0] == "c"
    results[("c", "P")] = R(0.1, verdicts=[{"verdict": True, "confidence": 0.97}])
    results[("e", "P")] = R(0.0, verdicts=[{"verdict": False, "cheap_verdict": True, "tier": "strong"}])
    assert calibrate_order(["a", "b", "c", "d", "e", "f"], results)[0] == "e"
    # labels that move the fit most first: a verdict at the decision boundary comes before a score near its
    # threshold whose verdicts are all sure (issue 47)
    near = {("x", "P"): R(0.95, verdicts=[{"verdict": "yes", "confidence": 0.52}]),
            ("y", "P"): R(0.51, verdicts=[{"verdict": "yes", "confidence": 0.99}, {"verdict": "no", "confidence": 0.02}])}
    assert calibrate_order(["y", "x"], near) == ["x", "y"]
    log = [{"field": "labels", "who": w, "case_key": c, "item": i, "value": v}
           for w, c, i, v in [("ann", "c0", "n1", True), ("bob", "c0", "n1", True), ("ann", "c0", "n2", False),
                              ("bob", "c0", "n2", True), ("bob", "c0", "n2", None)]]
    (pair,) = annotator_agreement(log)
    assert pair["items"] == 1 and pair["agreement"] == 1.0  # bob withdrew n2: one item in common


def test_calibrate_queue_labels_stay_out_of_the_bias_corrected_means_estimate_ones_enter(tmp_path):
    from contextjudge.cases.labels import node_ref
    from contextjudge.metrics import fill_gold_scores

    store = open_store(_make_store(str(tmp_path / "q.db")))
    for key, queue in (("c0", "calibrate"), ("c1", "estimate"), ("c2", "estimate")):
        for node, value in zip(NODES, (True, False, True), strict=True):
            store.give_label(key, "labels", node_ref(node), value, who="ann", queue=queue)
    store.give_label("c2", "labels", node_ref(NODES[1]), True, who="bob", queue="calibrate")  # c2 now chosen too
    gold = {tr.test_case.id: {m.name: m.gold_score for m in tr.metrics_data}
            for tr in fill_gold_scores(store.load_run("r1")).test_results}
    assert gold["c1"]["Contextual Precision"] is not None
    assert gold["c0"]["Contextual Precision"] is None and gold["c2"]["Contextual Precision"] is None
    assert {tc.id for tc in store.labelled_cases()} == {"c0", "c1", "c2"}  # calibrate uses them all
    assert [r["key"] for r in store.export_labels()] == ["c0", "c1", "c2"]
    assert "queue" not in store.export_labels()[0]
    for key in ("c3", "c4"):  # two more random-draw cases: enough for a corrected mean
        for node, value in zip(NODES, (True, True, False), strict=True):
            store.give_label(key, "labels", node_ref(node), value, who="ann", queue="estimate")
    corrected = LabelSession(store, FakeJudge()).figures()["corrected"]["Contextual Precision"]
    assert corrected["n_labelled"] == 3  # c1, c3, c4: not c0 nor c2
    want = fill_gold_scores(store.load_run("r1")).corrected("Contextual Precision")
    assert (corrected["corrected"]["estimate"], corrected["corrected"]["low"]) == (want.corrected.estimate,
                                                                                  want.corrected.low)


# ------------------------------------------------------------------------------------------------ browser
@pytest.mark.slow  # a real browser
def test_a_labelling_session_by_keyboard_saves_each_label_at_once(served, browser):
    store, start = served
    s = start()
    browser.open(s.url + "&key=c0")
    assert browser.js("document.querySelector('#case').getAttribute('data-key')") == "c0"
    press(browser, "1", "3", "j", "2", "4", "j", "1")  # node 1 useful+relevant; node 2 neither; node 3 useful
    settled(browser, 5)
    got = _latest(store, "c0")
    assert [(n["text"], n.get("labels"), n.get("relevance_labels")) for n in got["nodes"]] == [
        (NODES[0], True, True), (NODES[1], False, False), (NODES[2], True, None)]
    press(browser, "j", "1", "j", "2")  # the two statements of the expected output
    settled(browser, 7)
    assert _latest(store, "c0")["statement_labels"] == [True, False]
    press(browser, "u")  # undo the last: the second statement's label withdrawn
    settled(browser, 8)
    assert _latest(store, "c0")["statement_labels"] == [True]
    press(browser, "o")
    browser.send("Input.insertText", {"text": "statement 2 is half true"})
    press(browser, "Escape")
    settled(browser, 9)
    queues = json.loads(_get(s.base + "/api/queues", **{"X-CJ-Token": s.token})[1])["queues"]
    at = queues["calibrate"].index("c0")
    press(browser, "n")  # skip to the next case of the calibrate queue
    browser.wait_for(f"document.querySelector('#case').getAttribute('data-key') === "
                     f"{json.dumps(queues['calibrate'][at + 1])}")
    press(browser, "q")  # the estimate queue: recorded with the label
    est = queues["estimate"][0]
    browser.wait_for("document.querySelector('#queue').value === 'estimate' && "
                     f"document.querySelector('#case').getAttribute('data-key') === {json.dumps(est)}")
    press(browser, "1")
    settled(browser, 10)
    log = open_store(store).label_log()
    assert len(log) == 10
    assert [r["queue"] for r in log] == ["calibrate"] * 9 + ["estimate"]
    assert log[-1]["case_key"] == est
    assert log[7]["value"] is None and log[7]["field"] == "statement_labels"  # the undo, logged
    assert log[8]["field"] == "note" and log[8]["note"] == "statement 2 is half true"
    press(browser, "q")  # back to calibrate for the next test's tab (the queue is remembered per browser)


@pytest.mark.slow  # a real browser
def test_two_tabs_labelling_at_once_lose_and_double_nothing(served, browser):
    store, start = served
    s = start()
    browser.open(s.url + "&key=c1")
    a = browser.session
    browser.open(s.url + "&key=c1")
    b = browser.session
    # tab a labels node 1-3 usefulness, tab b their relevance and the statements, keys sent interleaved
    for step in range(3):
        browser.session = a
        press(browser, "1" if step != 1 else "2", "j")
        browser.session = b
        press(browser, "3" if step != 2 else "4", "j")
    browser.session = b
    press(browser, "1", "j", "1")
    for session, saved in ((a, 3), (b, 5)):
        browser.session = session
        settled(browser, saved)
    got = _latest(store, "c1")
    assert [(n.get("labels"), n.get("relevance_labels")) for n in got["nodes"]] == [
        (True, True), (False, True), (True, False)]
    assert got["statement_labels"] == [True, True]
    assert len(open_store(store).label_log()) == 8


@pytest.mark.slow  # a real browser
def test_two_annotators_see_their_agreement_with_each_other(served, browser):
    store, start = served
    s = start()
    tabs = []
    for who, keys in (("ann", "1 j 2 j 1"), ("bob", "1 j 1 j 1")):
        browser.open(s.url + "&key=c0")
        tabs.append(browser.session)
        browser.js("document.querySelector('#who').value = ''")
        browser.type("#who", who)
        press(browser, "Escape", *keys.split())
        settled(browser, 3)
    log = open_store(store).label_log()
    assert [(r["who"], r["value"]) for r in log] == [("ann", True), ("ann", False), ("ann", True),
                                                     ("bob", True), ("bob", True), ("bob", True)]
    (pair,) = annotator_agreement(log)
    assert (pair["a"], pair["b"], pair["items"], pair["agreement"]) == ("ann", "bob", 3, 2 / 3)
    browser.wait_for("document.querySelector('[data-pair=labels]') !== null")
    kappa = "n/a" if pair["kappa"] is None else f"{pair['kappa']:.3f}"
    assert browser.js("document.querySelector('[data-pair=labels]').textContent") == \
        f"labels: ann vs bob: kappa {kappa} on 3 items"
    browser.js("localStorage.removeItem('cj-who')")  # the name is kept per browser: none for the other tests


@pytest.mark.slow  # a real browser
def test_the_server_killed_mid_session_loses_nothing_given(served, browser):
    store, start = served
    s = start()
    browser.open(s.url + "&key=c2")
    press(browser, "1", "j", "2")
    settled(browser, 2)
    s.kill()
    press(browser, "j", "1")  # the click in flight when the server is gone: the page says it was not saved
    browser.wait_for("document.querySelector('#status').className === 'err'")
    s2 = start()
    browser.open(s2.url + "&key=c2")  # a new token: the page reopened from the new address
    assert browser.js("[...document.querySelectorAll('#case .row')].slice(0, 3).map("
                      "r => r.querySelector('button.on-yes, button.on-no')?.textContent ?? null)") == \
        ["yes", "no", None]
    press(browser, "j", "j", "1")
    settled(browser, 1)
    got = _latest(store, "c2")
    assert [n.get("labels") for n in got["nodes"]] == [True, False, True]
    assert len(open_store(store).label_log()) == 3


@pytest.mark.slow  # a real browser
def test_markup_and_script_in_a_case_are_shown_as_text(served, browser):
    _, start = served
    s = start()
    browser.open(s.url + "&key=evil")
    assert browser.js("document.querySelector('#case').getAttribute('data-key')") == "evil"
    assert browser.js("window.cjPwned === undefined")
    assert browser.js("document.querySelectorAll('#case script, #case img, #case b').length") == 0
    assert browser.js(f"document.querySelector('#case').textContent.includes({json.dumps(EVIL)})")


@pytest.mark.slow  # a real browser
def test_the_figures_on_the_page_are_calibrate_json_on_the_same_labels(served, browser, capsys):
    store, start = served
    s = start()
    # three nodes (useful, relevant), the expected output's two statements, then the answer's one statement
    # (supported; on c4 given, undone and given the other way)
    for key, keys, saved in (("c3", "1 3 j 2 4 j 1 4 j 1 j 2 j 1", 9), ("c4", "2 4 j 1 3 j 2 3 j 2 j 1 j 1 u 2", 11)):
        browser.open(s.url + f"&key={key}")
        press(browser, *keys.split())
        settled(browser, saved)
    assert [(_latest(store, k)["answer_statements"], _latest(store, k)["answer_statement_labels"])
            for k in ("c3", "c4")] == [(["25 days."], [True]), (["25 days."], [False])]
    rc = cli.main(["calibrate", "--store", store, "--model", "fake", "--json", "--no-save", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0

    def fmt(x, iv):
        return "n/a" if x is None else f"{x:.3f}" + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "")

    # 19 labels saved, 18 items labelled: c4's answer statement, given, withdrawn and given again, counts once
    # (the count was 18 before the withdrawal too: wait for the figures of the last label)
    last = "statement_support.actual_output"
    browser.wait_for("document.body.getAttribute('data-cj-figures') === '18' && "
                     f"document.querySelector('td[data-fam=\"{last}\"][data-k=kappa]')?.textContent === "
                     f"{json.dumps(fmt(report[last]['kappa'], report[last]['kappa_ci']))}")
    assert "18 from calibrate" in browser.js("document.querySelector('#given').textContent")
    shown = {(c["fam"], c["k"]): c["text"] for c in browser.js(
        "[...document.querySelectorAll('td[data-k]')].map(td => ({fam: td.dataset.fam, k: td.dataset.k, "
        "text: td.textContent}))")}

    fams = [f for f in ("node_usefulness", "sentence_relevance", "statement_support",
                        "statement_support.actual_output") if f in report]
    assert "statement_support.actual_output" in fams
    assert any(shown[(f, "kappa")] != "n/a" for f in fams)  # figures, not only placeholders
    for f in fams:
        assert shown[(f, "items")] == str(report[f]["items"])
        for k in ("kappa", "tpr", "tnr"):
            assert shown[(f, k)] == fmt(report[f][k], report[f][f"{k}_ci"]), (f, k)
    advice = browser.js("[...document.querySelectorAll('[data-advice]')].map(p => p.textContent)")
    assert advice == [f"{a['metric']}: {a['advice']} ({a['why']})" for a in report["advice"]]


@pytest.mark.slow  # a real browser
def test_nine_quick_labels_then_the_tab_closed_keeps_all_nine(served, browser):
    """The store is slow (another writer holds it) while nine labels are keyed in a burst: the page counts them
    unsaved, asks before the tab closes, and every one reaches the store after it is gone (2 of 9 did)."""
    store, start = served
    s = start()
    browser.open(s.url + "&key=c3")
    assert "useful" in browser.js("document.querySelector('#meanings').textContent")
    lock = _hold_store(store)
    try:
        press(browser, "1", "3", "5", "j", "2", "4", "6", "j", "1", "3", "5")  # useful, relevant, used x 3 nodes
        browser.wait_for("document.querySelector('#unsaved').textContent === '9 unsaved'")
        assert browser.js("document.body.getAttribute('data-cj-pending')") == "9"
        browser.send("Page.close")  # the tab closed as a person closes it: the page's beforeunload runs
        deadline, asked = time.monotonic() + 30, False
        while not asked and time.monotonic() < deadline:
            try:
                browser.send("Page.handleJavaScriptDialog", {"accept": True})  # "Leave"
                asked = True
            except RuntimeError:  # no dialog yet
                time.sleep(0.05)
        assert asked, "leaving with unsaved labels did not ask first"
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    deadline = time.monotonic() + 60
    while len(open_store(store).label_log()) < 9 and time.monotonic() < deadline:
        time.sleep(0.1)
    got = _latest(store, "c3")
    assert [(n.get("labels"), n.get("relevance_labels"), n.get("utilization_labels")) for n in got["nodes"]] == [
        (True, True, True), (False, False, False), (True, True, True)]
    assert len(open_store(store).label_log()) == 9
