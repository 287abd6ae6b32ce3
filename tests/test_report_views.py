"""The report for a long run, read back from its HTML: what the filter/sort/search script reads (data attributes),
run names, per-metric colours, the baseline's nodes beside a changed case, the reranker's effect, agent provenance
and error cases.

The runs are real: scored by ``evaluate`` with the scripted ``FakeJudge`` into a SQLite store, reported from the
store. The page is parsed with the standard library's HTML parser into a small element tree.
"""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

import pytest

from contextjudge import LLMTestCase, RetrievedNode, evaluate
from contextjudge.metrics import (
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    ContextUtilizationMetric,
)
from contextjudge.report import render_report
from contextjudge.testing import FakeJudge

DOCS = {
    "vacation": "Employees get 25 vacation days per year. Unused vacation days carry over until March.",
    "parking": "The parking garage opens at 6am. Visitor parking is on level 2.",
    "expenses": "Expenses above 500 euros need a manager's approval. Receipts are required.",
    "laptops": "Every engineer gets a laptop refresh every three years.",
}
IDS = {text: key for key, text in DOCS.items()}
METRICS = ["Contextual Precision", "Contextual Recall", "Contextual Relevancy", "Context Utilization"]


def _node(key: str) -> RetrievedNode:
    return RetrievedNode(DOCS[key], id=key)


def _cases(good: bool) -> list[LLMTestCase]:
    """Six cases: a plain one, an agent's tool call, a reranked one, one whose postprocessors kept no node, one whose
    app raised, and one with no expected output (so precision and recall cannot run)."""
    first = ["vacation", "parking", "expenses"] if good else ["parking", "expenses", "vacation"]
    return [
        LLMTestCase(input="How many vacation days do employees get per year?", name="vacation days",
                    actual_output="Employees get 25 vacation days per year.",
                    expected_output="Employees get 25 vacation days per year.",
                    retrieval_context=[_node(k) for k in first]),
        LLMTestCase(
            input="Hi! I'm new here. When does the parking garage open?", name="hr_search: parking question",
            # the answer is about parking, the expected output too; utilization and precision judge the same nodes
            actual_output="The parking garage opens at 6am.", expected_output="The parking garage opens at 6am.",
            retrieval_context=[_node("parking"), _node("laptops")],
            additional_metadata={"agent": {"tool": "hr_search", "tool_input": "parking garage opening hours",
                                           "tool_output": "The garage opens at 6am (tool's own answer).",
                                           "call": 2, "agent": "FunctionAgent", "framework": "llama_index",
                                           "thread_id": "thread-7"}}),
        LLMTestCase(
            input="Which expenses need a manager's approval?", name="expenses",
            actual_output="Expenses above 500 euros need a manager's approval.",
            expected_output="Expenses above 500 euros need a manager's approval.",
            retrieval_context=[_node("expenses"), _node("vacation")],
            additional_metadata={"retriever": "VectorIndexRetriever", "retriever_ranking": [
                _node("vacation").model_dump(), _node("parking").model_dump(), _node("expenses").model_dump()]}),
        LLMTestCase(
            input="How often do engineers get a new laptop?", name="laptops",
            actual_output="I could not find that.", expected_output="Every three years.", retrieval_context=[],
            additional_metadata={"retriever_ranking": [_node("laptops").model_dump()]}),
        LLMTestCase(input="Where is visitor parking?", name="crashing golden",
                    additional_metadata={"app_error": {"type": "TimeoutError",
                                                       "message": "the vector store did not answer in 30 s"}}),
        LLMTestCase(input="Is there a gym?", name="no expected output", actual_output="No.",
                    retrieval_context=[_node("laptops")]),
    ]


def _metrics(judge):
    return [ContextualPrecisionMetric(model=judge), ContextualRecallMetric(model=judge),
            ContextualRelevancyMetric(model=judge), ContextUtilizationMetric(model=judge)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("report") / "results.db")
    judge = FakeJudge()
    evaluate(_cases(good=False), _metrics(judge), store=db, run_id="base", run_name="nightly baseline",
             show_progress=False)
    evaluate(_cases(good=True), _metrics(judge), store=db, run_id="cand", run_name="candidate reranker",
             show_progress=False)
    return db


# ---------------------------------------------------------------------------------------------- a small DOM
class El:
    def __init__(self, tag: str, attrs: dict[str, str], parent: El | None) -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []
        self.parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self):
        for c in self.children:
            yield c
            yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[El]:
        return [el for el in self.iter() if (tag is None or el.tag == tag) and (cls is None or cls in el.classes)
                and all(el.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> El:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> under <{self.tag} {self.attrs}>"
        return found[0]


VOID = {"meta", "input", "br", "hr", "img", "link"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = El("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        el = El(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(el)
        if tag not in VOID:
            self.cur = el

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(El(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag):
        el = self.cur
        while el is not self.root and el.tag != tag:
            el = el.parent
        if el is not self.root:
            self.cur = el.parent

    def handle_data(self, data):
        el = self.cur
        while el is not None:
            el.parts.append(data)
            el = el.parent


def parse(page: str) -> El:
    b = _Builder()
    b.feed(page)
    b.close()
    return b.root


@pytest.fixture(scope="module")
def compared(store) -> tuple[str, El]:
    page = render_report(store=store, run="cand", compare="base")
    return page, parse(page)


def _rows(dom: El) -> dict[str, El]:
    return {r.attrs["data-i"]: r for r in dom.find("table", id="cj-cases").find_all("tr", "cj-row")}


def _cards(dom: El) -> dict[str, El]:
    return {c.attrs["data-i"]: c for c in dom.find("div", id="cj-case-list").find_all("details", "case")}


# ---------------------------------------------------------------------------------------------- tests
def test_rows_and_cards_carry_what_the_script_filters_and_sorts_on(compared):
    _, dom = compared
    rows, cards = _rows(dom), _cards(dom)
    assert list(rows) == [str(i) for i in range(6)] == list(cards)
    heads = dom.find("table", id="cj-cases").find_all("button")
    assert [b.attrs["data-sort"] for b in heads] == ["", "m0", "m1", "m2", "m3"]
    assert [b.text for b in heads[1:]] == METRICS
    for i, row in rows.items():  # the card of a case carries exactly its row's attributes
        assert {k: v for k, v in row.attrs.items() if k.startswith("data-")} == \
               {k: v for k, v in cards[i].attrs.items() if k.startswith("data-")}
    first = rows["0"].attrs
    assert first["data-failing"] in ("0", "1") and first["data-error"] == "0"
    assert float(first["data-m0"]) == pytest.approx(1.0)  # the candidate ranks the useful node first
    assert float(first["data-d0"]) > 0 and first["data-changed"] == "1"
    crash = rows["4"].attrs
    assert crash["data-failing"] == "1" and crash["data-error"] == "1"
    assert [crash[f"data-m{k}"] for k in range(4)] == ["err"] * 4
    assert crash["data-err"].split() == ["0", "1", "2", "3"] and crash["data-fail"].split() == ["0", "1", "2", "3"]
    no_ref = rows["5"].attrs  # precision and recall need an expected output: errors; relevancy/utilization scored
    assert no_ref["data-error"] == "1" and no_ref["data-err"].split() == ["0", "1"]
    assert no_ref["data-m0"] == no_ref["data-m1"] == "err"
    float(no_ref["data-m2"]), float(no_ref["data-m3"])
    passing = [i for i, r in rows.items() if r.attrs["data-failing"] == "0"]
    assert all(rows[i].attrs["data-fail"] == "" for i in passing)


def test_toolbar_is_rendered_hidden_for_the_script_and_every_case_is_in_the_page(compared):
    _, dom = compared
    bar = dom.find("div", id="cj-toolbar")
    assert "hidden" in bar.attrs  # shown by the script; without scripts every case is simply listed
    assert [b.attrs["data-filter"] for b in bar.find_all("button")] == ["all", "failing", "errors", "passing",
                                                                         "changed"]
    sort_values = [o.attrs["value"] for o in bar.find("select", id="cj-sort").find_all("option")]
    assert sort_values[:3] == ["", "m0:1", "m0:-1"] and "d0:1" in sort_values
    assert [o.text for o in bar.find("select", id="cj-filter-metric").find_all("option")] == ["any metric", *METRICS]
    assert bar.find("input", id="cj-search").attrs["type"] == "search"
    assert "Scripts are off" in dom.find("noscript").text


def test_the_only_script_is_the_reports_own_and_the_csp_allows_it_by_hash(compared):
    page, dom = compared
    scripts = dom.find_all("script")
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].text.encode()).digest()).decode()
    csp = dom.find("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "https://" not in page and "<link" not in page


def test_run_names_in_the_header_and_the_compare_view(compared):
    _, dom = compared
    assert dom.find(cls="cj-run-name").text == "candidate reranker"
    assert dom.find(cls="cj-baseline-name").text == "nightly baseline"
    assert "run cand" in " ".join(p.text for p in dom.find_all("p", "meta"))
    h2 = [h.text for h in dom.find_all("h2")]
    assert "Compared with nightly baseline (base)" in h2
    runs = dom.find("p", "cj-compare-runs").text
    assert "This run: candidate reranker (cand)" in runs and "baseline: nightly baseline (base)" in runs


def test_each_metric_cell_is_coloured_by_its_own_result(compared):
    _, dom = compared
    rows = _rows(dom)
    first = [td for td in rows["0"].find_all("td") if td.attrs.get("data-status")]
    assert len(first) == 4
    for td in first:  # the class follows the cell's own status, metric by metric
        assert f"m-{ {'pass': 'pass', 'fail': 'fail', 'error': 'err'}[td.attrs['data-status']] }" in td.classes
    statuses = {td.attrs["data-status"] for td in first}
    assert statuses == {"pass", "fail"}  # relevancy fails (a third of the sentences) where precision passes
    assert {td.attrs["data-status"] for td in rows["4"].find_all("td") if td.attrs.get("data-status")} == {"error"}
    # inside a case, each per-node metric's verdict is coloured in its own cell, not the whole row by precision
    nodes = _cards(dom)["0"].find("table", "cj-nodes")
    assert [th.text for th in nodes.find("thead").find_all("th")] == ["Rank", "Node", "Contextual Precision",
                                                                      "Context Utilization", "Relevant sentences"]
    for tr in nodes.find("tbody").find_all("tr"):
        assert "class" not in tr.attrs
        verdict_cells = tr.find_all("td")[2:4]
        for td in verdict_cells:
            assert td.classes & {"v-yes", "v-no"}
            assert f"v-{td.find('span', 'verdict').text}" in td.classes
    ranks = nodes.find("tbody").find_all("tr")
    assert "v-yes" in ranks[0].find_all("td")[2].classes and "v-no" in ranks[1].find_all("td")[2].classes


def test_a_changed_case_shows_the_baselines_ranked_nodes_beside_this_runs(compared):
    _, dom = compared
    card = _cards(dom)["0"]
    table = card.find("table", "cj-baseline-nodes")
    assert "nightly baseline (base)" in table.find("thead").text
    rows = table.find("tbody").find_all("tr")
    cur = [r.find("td", "cur").text for r in rows]
    base = [r.find("td", "base").text for r in rows]
    assert cur == [DOCS["vacation"], DOCS["parking"], DOCS["expenses"]]
    assert base == [DOCS["parking"], DOCS["expenses"], DOCS["vacation"]]
    assert "#3 there" in rows[0].text and "#1 there" in rows[1].text  # where each node sits in the other run
    # the baseline's own verdicts: its first node (parking) was judged not useful for the vacation question
    for row, verdict in zip(rows, ["no", "no", "yes"], strict=True):
        cells = row.find_all("td")
        base_precision = cells[cells.index(row.find("td", "base")) + 2]
        assert base_precision.text == verdict and f"v-{verdict}" in base_precision.classes
    scores = card.find("div", "cj-vs-baseline").text
    assert "Contextual Precision: 0.333 → 1.000 +0.667" in scores
    # a case whose nodes and scores did not change shows no side-by-side table
    assert not _cards(dom)["1"].find_all("table", "cj-baseline-nodes")
    assert _rows(dom)["1"].attrs["data-changed"] == "0"


def test_the_rerankers_effect_moved_dropped_and_an_empty_final_list(compared):
    _, dom = compared
    card = _cards(dom)["2"]
    rerank = card.find("details", "cj-ranking")
    assert "3 retrieved, 2 kept: 1 dropped, 2 moved" in rerank.find(cls="cj-rank-counts").text
    rows = rerank.find("table", "cj-rerank").find("tbody").find_all("tr")
    assert [(r.find("div", "text").text, r.attrs["data-change"]) for r in rows] == [
        (DOCS["vacation"], "down"), (DOCS["parking"], "dropped"), (DOCS["expenses"], "up")]
    assert [r.find_all("td")[2].text for r in rows] == ["#2", "dropped", "#1"]
    assert "Retriever" in card.text and "VectorIndexRetriever" in card.text
    assert "reranked" in _rows(dom)["2"].find(cls="rerank").text

    empty = _cards(dom)["3"]
    msg = empty.find("p", "cj-empty-final").text
    assert msg.startswith("Postprocessors left no node") and "returned 1 node(s)" in msg
    assert "open" in empty.find("details", "cj-ranking").attrs
    assert [r.attrs["data-change"] for r in empty.find("table", "cj-rerank").find("tbody").find_all("tr")] == [
        "dropped"]
    assert "no node kept" in _rows(dom)["3"].text


def test_agent_provenance_is_shown_on_the_case_and_searchable(compared):
    _, dom = compared
    card = _cards(dom)["1"]
    agent = card.find("div", "cj-agent")
    fields = {f.find("b").text: f.find("span").text for f in agent.find_all("div", "field")}
    assert fields == {"Tool": "hr_search (call 2 in the turn)", "Tool query": "parking garage opening hours",
                      "Tool answer": "The garage opens at 6am (tool's own answer).", "Thread": "thread-7"}
    assert "FunctionAgent, llama_index" in agent.text
    searchable = " ".join(el.text for el in card.find_all(cls="cj-s"))
    for text in ("Hi! I'm new here.", "parking garage opening hours", "The parking garage opens at 6am.",
                 DOCS["laptops"], "hr_search: parking question", "(tool's own answer)"):
        assert text in searchable, text
    assert "tool hr_search" in _rows(dom)["1"].find(cls="agent").text


def test_error_cases_show_their_messages_and_the_summary_counts_errors_per_metric(compared):
    _, dom = compared
    summary = {tr.attrs["data-metric"]: tr for tr in dom.find("table", "cj-summary").find_all("tr")
               if tr.attrs.get("data-metric")}
    errors = {name: int(tr.find("td", "cj-errors").text) for name, tr in summary.items()}
    assert errors == {"Contextual Precision": 2, "Contextual Recall": 2, "Contextual Relevancy": 1,
                      "Context Utilization": 1}
    for tr in summary.values():  # the mean keeps its 95% interval
        assert re.fullmatch(r"\[\d\.\d{3}, \d\.\d{3}\]", tr.find_all("td")[2].text)
    table = dom.find("table", "cj-error-summary")
    kinds = {(r.find_all("td")[0].text, r.find_all("td")[1].text): int(r.find_all("td")[2].text)
             for r in table.find("tbody").find_all("tr")}
    assert kinds[("Contextual Precision", "AppError")] == 1
    assert kinds[("Contextual Precision", "MissingTestCaseParamsError")] == 1
    assert "the vector store did not answer in 30 s" in table.text

    crash = _cards(dom)["4"]
    app = crash.find("div", "cj-app-error").text
    assert "TimeoutError" in app and "the vector store did not answer in 30 s" in app
    assert "app error" in _rows(dom)["4"].text
    metric_errors = crash.find_all("div", "cj-error")
    assert len(metric_errors) == 4 and all("AppError" in m.text for m in metric_errors)
    missing = _cards(dom)["5"].find_all("div", "cj-error")
    assert len(missing) == 2 and all(re.search("expected[ _]output", m.text) for m in missing)
    assert "2 case(s) with an error" in dom.find_all("p", "meta")[0].text


def test_a_report_without_a_baseline_has_no_compare_controls(store):
    dom = parse(render_report(store=store, run="cand"))
    bar = dom.find("div", id="cj-toolbar")
    assert "changed" not in [b.attrs["data-filter"] for b in bar.find_all("button")]
    assert not any(k.startswith("data-d") or k == "data-changed" for r in _rows(dom).values() for k in r.attrs)
    assert not dom.find_all("table", "cj-baseline-nodes")
    assert dom.find(cls="cj-run-name").text == "candidate reranker"


def test_conversation_turn_verdicts_land_on_their_turn(tmp_path):
    from contextjudge import ConversationalTestCase, Turn
    from contextjudge.metrics import TurnContextualPrecisionMetric

    conv = ConversationalTestCase(name="chat", turns=[
        Turn(role="user", content="Tell me about vacation."),
        Turn(role="assistant", content="You get 25 days.", retrieval_context=[DOCS["vacation"], DOCS["parking"]],
             expected_output="Employees get 25 vacation days per year."),
        Turn(role="user", content="And parking?"),
        Turn(role="assistant", content="It opens at 6am.", retrieval_context=[DOCS["vacation"], DOCS["parking"]],
             expected_output="The parking garage opens at 6am.",
             additional_metadata={"agent": {"tool": "hr_search", "tool_input": "parking", "call": 1}}),
    ])
    res = evaluate([conv], [TurnContextualPrecisionMetric(model=FakeJudge())], show_progress=False)
    dom = parse(render_report(res))
    tables = _cards(dom)["0"].find_all("table", "cj-nodes")
    assert len(tables) == 2
    first = [tr.find_all("td")[2].find("span", "verdict").text for tr in tables[0].find("tbody").find_all("tr")]
    second = [tr.find_all("td")[2].find("span", "verdict").text for tr in tables[1].find("tbody").find_all("tr")]
    assert first == ["yes", "no"] and second == ["no", "yes"]
    assert _cards(dom)["0"].find("div", "cj-agent").find("span").text == "hr_search (call 1 in the turn)"


def test_a_golden_whose_app_call_raised_is_an_error_case_in_the_report(tmp_path):
    from contextjudge.capture import GoldenFailure
    from contextjudge.goldens import Golden

    failure = GoldenFailure(Golden(input="When does the garage open?", expected_output="At 6am."), 3,
                            ConnectionError("vector store unreachable <at> 10.0.0.7"))
    db = str(tmp_path / "r.db")
    evaluate([_cases(True)[0], failure.test_case()], _metrics(FakeJudge()), store=db, run_id="r1",
             run_name="with a failing golden", show_progress=False)
    page = render_report(store=db, run="r1")
    dom = parse(page)
    row = _rows(dom)["1"]
    assert row.attrs["data-error"] == "1" and row.attrs["data-failing"] == "1"
    app = _cards(dom)["1"].find("div", "cj-app-error").text
    assert "ConnectionError" in app and "vector store unreachable <at> 10.0.0.7" in app
    assert "&lt;at&gt;" in page  # escaped like every other text
    assert "1 case(s) with an error" in page


def test_a_case_missing_from_the_baseline_is_marked(tmp_path):
    db = str(tmp_path / "r.db")
    evaluate(_cases(False)[:2], _metrics(FakeJudge()), store=db, run_id="b", show_progress=False)
    evaluate(_cases(True)[:3], _metrics(FakeJudge()), store=db, run_id="c", show_progress=False)
    dom = parse(render_report(store=db, run="c", compare="b"))
    rows = _rows(dom)
    assert [bool(r.find_all(cls="new")) for r in rows.values()] == [False, False, True]
    assert rows["2"].attrs["data-changed"] == "0" and "data-d0" not in rows["2"].attrs
