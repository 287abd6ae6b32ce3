"""How long the labelling page's server takes to save one label, and to recompute the figures after one.

    python benchmarks/label_page.py [--cases 50] [--labels 200] [--refresh-every 0]

A SQLite store of ``--cases`` synthetic cases (five nodes each, three retrieval metrics judged by the scripted
``FakeJudge``) is served by ``contextjudge label --serve``'s server on loopback, in this process; ``--labels`` labels
are posted one after the other (each is a read-modify-write of the case's labels through ``add_labels`` plus a
``cj_label_log`` row, committed before the answer), then ``/api/figures`` is asked once (``acalibrate`` over every
labelled case with the FakeJudge, the estimate-queue bias-corrected means, annotator agreement). Prints the median
and 95th percentile of a label's round trip and the figures' time. With ``--refresh-every K`` the figures are also
asked after every K labels, as an open page polls them, and the judge requests those refreshes sent are counted (the
judged labelled cases are kept in the store, so each refresh judges only the cases a label changed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from contextjudge import LLMTestCase, evaluate  # noqa: E402
from contextjudge.cases.labels import node_ref  # noqa: E402
from contextjudge.cli._label_serve import LabelSession, _handler  # noqa: E402
from contextjudge.metrics import ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric  # noqa: E402
from contextjudge.store import open_store  # noqa: E402
from contextjudge.testing import FakeJudge  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--labels", type=int, default=200)
    ap.add_argument("--refresh-every", type=int, default=0,
                    help="also ask for the figures after every K labels, and count the judge requests they send")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        cases = [LLMTestCase(id=f"c{i}", input=f"question {i}?", actual_output="an answer.",
                             expected_output="The first fact. The second fact.",
                             retrieval_context=[f"node {i}-{k}: some text about fact {k}." for k in range(5)])
                 for i in range(a.cases)]
        judge = FakeJudge()
        evaluate(cases, [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
                         ContextualRelevancyMetric(model=judge)], store=path, run_id="r1", show_progress=False)
        session = LabelSession(open_store(path), judge)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(session, "tok", b"page"))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        times = []
        before = len(judge.calls)
        refreshes = 0
        for n in range(a.labels):
            tc = cases[n % a.cases]
            node = tc.retrieval_context[(n // a.cases) % 5]
            body = json.dumps({"key": tc.id, "field": "labels", "item": node_ref(node), "value": n % 3 != 0,
                               "queue": "estimate" if n % 2 else "calibrate", "who": "bench"}).encode()
            req = urllib.request.Request(base + "/api/label", data=body, headers={"X-CJ-Token": "tok"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req) as r:
                r.read()
            times.append(time.perf_counter() - t0)
            if a.refresh_every and (n + 1) % a.refresh_every == 0:
                get = urllib.request.Request(base + "/api/figures", headers={"X-CJ-Token": "tok"})
                with urllib.request.urlopen(get) as r:
                    r.read()
                refreshes += 1
        t0 = time.perf_counter()
        with urllib.request.urlopen(urllib.request.Request(base + "/api/figures", headers={"X-CJ-Token": "tok"})) as r:
            r.read()
        figures = time.perf_counter() - t0
        server.shutdown()
        times.sort()
        print(f"{a.labels} labels on {a.cases} cases: a label's round trip median "
              f"{statistics.median(times) * 1000:.1f} ms, p95 {times[int(0.95 * len(times))] * 1000:.1f} ms; "
              f"figures after them {figures:.2f} s; load average {os.getloadavg()[0]:.2f}")
        if refreshes:
            asked = sum(c["task"] is not None for c in judge.calls[before:])
            print(f"{refreshes} refreshes of the figures (one every {a.refresh_every} labels) and the last: "
                  f"{asked} judge requests")


if __name__ == "__main__":
    main()
