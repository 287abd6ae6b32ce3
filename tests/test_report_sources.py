"""The report names the user's document each retrieved chunk came from (its id and title), beside the chunk's id."""

from __future__ import annotations

from contextjudge import LLMTestCase, RetrievedNode, evaluate
from contextjudge.cases.provenance import SOURCE_DOC_KEY, source_of
from contextjudge.metrics import ContextualRelevancyMetric
from contextjudge.report import render_report
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge


def test_source_of_reads_both_frameworks_keys():
    assert source_of({SOURCE_DOC_KEY: "handbook", "file_name": "handbook.pdf"}) == ("handbook", "handbook.pdf")
    assert source_of({"source": "https://example.com/pto", "title": "PTO"}) == ("https://example.com/pto", "PTO")
    assert source_of({"topic": "x"}) == (None, None) and source_of(None) == (None, None)


def test_report_shows_the_source_document(tmp_path):
    nodes = [RetrievedNode("Full-time staff get 25 days of paid time off.", id="chunk-7f3a",
                           metadata={SOURCE_DOC_KEY: "hr-handbook-2026", "title": "HR handbook <2026>"}),
             RetrievedNode("The office opens at 8am.", id="chunk-0001")]
    tc = LLMTestCase(input="How many PTO days?", actual_output="25 days.", retrieval_context=nodes)
    store = open_store(str(tmp_path / "r.db"))
    evaluate([tc], [ContextualRelevancyMetric(model=FakeJudge())], store=store, show_progress=False)
    html = render_report(store=store)
    assert "from <b>HR handbook &lt;2026&gt;</b> <span class='cj-src'>hr-handbook-2026</span>" in html
    assert "id chunk-7f3a" in html and "source_doc_id=" not in html  # shown once, as the source
    assert html.count("class='cj-src'") == 1  # the chunk with no source says nothing of one
