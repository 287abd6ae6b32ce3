"""One case in the report: its row in the cases table and its card (fields, provenance, errors, ranked nodes).

A card shows what the case is (input, output, expected output, or a conversation's turns), where it came from (an
agent's tool call, the retriever), why it errored, the ranked nodes with each per-node metric's verdict coloured
in its own cell, the retriever's ranking against the final one when postprocessors changed it, and in a comparison
the baseline's ranked nodes beside this run's. The text a search looks at is marked with the class ``cj-s``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from .._result import PER_NODE, MetricResult, TestResult
from ..cases.goldens import normalize_input
from ..cases.provenance import (
    AGENT_KEY,
    APP_ERROR_KEY,
    MATCH_INPUTS_KEY,
    RETRIEVER_KEY,
    RETRIEVER_RANKING_KEY,
    SOURCE_DOC_KEY,
    agent_of,
    app_error_of,
    source_of,
)
from ..cases.testcase import ConversationalTestCase
from ._format import case_input, e, num, short, signed, status

__all__ = ["CaseContext", "case_card", "case_row", "node_key"]

_KNOWN_META = {AGENT_KEY, APP_ERROR_KEY, RETRIEVER_KEY, RETRIEVER_RANKING_KEY, MATCH_INPUTS_KEY}


@dataclass
class CaseContext:
    """What every case of the page shares: the metric columns, and in a comparison the paired baseline cases."""

    metrics: list[str]
    baseline: dict[int, TestResult] | None = None  # this run's case index -> the baseline's paired case
    baseline_label: str = "baseline"
    columns: dict[str, int] = field(init=False)
    attrs: dict[int, str] = field(init=False, default_factory=dict)  # case index -> its data attributes
    changed: dict[int, bool] = field(init=False, default_factory=dict)  # case index -> changed vs its baseline

    def __post_init__(self) -> None:
        self.columns = {name: k for k, name in enumerate(self.metrics)}

    def is_changed(self, tr: TestResult) -> bool:
        """Whether the case changed against its paired baseline case (worked out once per case)."""
        if tr.index not in self.changed:
            base = self.baseline.get(tr.index) if self.baseline is not None else None
            self.changed[tr.index] = _changed(tr, base)
        return self.changed[tr.index]


# --------------------------------------------------------------------------------------------------- nodes
def _node_parts(node: Any) -> tuple[str, str | None, float | None, dict[str, Any]]:
    """(text, id, score, metadata) of a RetrievedNode, a node dict (as stored under retriever_ranking) or a text."""
    if isinstance(node, dict):
        text = node.get("text", node.get("page_content", ""))
        meta = node.get("metadata")
        nid = node.get("id")
        score = node.get("score")
        return (str(text or ""), None if nid is None else str(nid),
                score if isinstance(score, (int, float)) else None, meta if isinstance(meta, dict) else {})
    if isinstance(node, str):
        return node, None, None, {}
    meta = getattr(node, "metadata", None)
    return (str(getattr(node, "text", "") or ""), getattr(node, "id", None), getattr(node, "score", None),
            meta if isinstance(meta, dict) else {})


def node_key(node: Any) -> str:
    """How a node is recognised in another list: its id, else its text."""
    text, nid, _, _ = _node_parts(node)
    return f"id:{nid}" if nid else f"text:{normalize_input(text)}"


def _find(node: Any, others: list[Any]) -> int | None:
    """The 0-based position of ``node`` in ``others``: by id when both have one, else by text."""
    text, nid, _, _ = _node_parts(node)
    norm = normalize_input(text)
    by_text = None
    for j, other in enumerate(others):
        otext, oid, _, _ = _node_parts(other)
        if nid and oid:
            if nid == oid:
                return j
            continue
        if by_text is None and normalize_input(otext) == norm:
            by_text = j
    return by_text


def _node_meta(node: Any) -> str:
    _, nid, score, meta = _node_parts(node)
    bits = []
    doc, title = source_of(meta)
    if doc or title:  # the user's document the chunk came from, first: what a person recognises
        bits.append("from " + (f"<b>{e(title)}</b>" if title else "") + (" " if doc and title else "")
                    + (f"<span class='cj-src'>{e(doc)}</span>" if doc else ""))
    if nid:
        bits.append(f"id {e(nid)}")
    if score is not None:
        bits.append(f"retriever score {score:.3f}")
    rest = {k: v for k, v in (meta or {}).items() if k != SOURCE_DOC_KEY}
    if rest:
        shown = ", ".join(f"{k}={v}" for k, v in list(rest.items())[:4])
        bits.append(e(short(shown, 120)))
    return " · ".join(bits)


@functools.cache
def _builtin_judges_nodes() -> dict[str, bool]:
    from ..metrics import BY_KEY  # noqa: PLC0415 - loaded on first use, as the package loads its names

    return {cls.name: cls.judges_nodes for cls in BY_KEY.values()}


def _judges_nodes(m: MetricResult) -> bool:
    """Whether ``m``'s verdicts are one per retrieved node, as its metric recorded when it scored (for results
    stored before metrics recorded it, the built-in metric of that name says)."""
    flag = (m.details or {}).get(PER_NODE)
    if flag is not None:
        return bool(flag)
    return _builtin_judges_nodes().get(m.name, False)


@dataclass
class _Verdicts:
    """A node list's verdicts: per per-node metric and rank, and relevancy's per-sentence verdicts per rank."""

    by_rank: dict[str, dict[int, dict[str, Any]]]
    relevancy: dict[int, list[dict[str, Any]]]
    node_metrics: list[str]


def _turn_of(v: dict[str, Any], turn_ids: dict[Any, int] | None) -> int | None:
    """The turn (list index) a conversation verdict belongs to."""
    if "turn_index" in v:
        return v["turn_index"]
    t = v.get("turn")
    return turn_ids.get(t) if turn_ids is not None else t


def _verdicts(metrics: list[MetricResult], turn: int | None = None,
              turn_ids: dict[Any, int] | None = None) -> _Verdicts:
    by_rank: dict[str, dict[int, dict[str, Any]]] = {}
    relevancy: dict[int, list[dict[str, Any]]] = {}
    node_metrics: list[str] = []
    for m in metrics:
        per_node = _judges_nodes(m)
        for v in m.verdicts:
            if not isinstance(v, dict) or not isinstance(v.get("rank"), int):
                continue
            if turn is not None and _turn_of(v, turn_ids) != turn:
                continue
            if "statement" in v:  # relevancy: one verdict per sentence of a node
                relevancy.setdefault(v["rank"], []).append(v)
            elif per_node:
                by_rank.setdefault(m.name, {})[v["rank"]] = v
                if m.name not in node_metrics:
                    node_metrics.append(m.name)
    return _Verdicts(by_rank, relevancy, node_metrics)


def _verdict_cell(v: dict[str, Any] | None, with_reason: bool = True) -> str:
    if v is None:
        return "<td class='v-none'></td>"
    verdict = str(v.get("verdict", ""))
    cls = f"v-{verdict}" if verdict in ("yes", "no") else "v-none"
    reason = f" <span class='reason'>{e(v.get('reason', ''))}</span>" if with_reason else ""
    return f"<td class='{cls}'><span class='verdict {e(verdict)}'>{e(verdict)}</span>{reason}</td>"


def _relevancy_cell(rel: list[dict[str, Any]], detail: bool = True) -> str:
    n_yes = sum(1 for x in rel if x.get("verdict") == "yes")
    cls = "v-none" if not rel else "v-yes" if n_yes == len(rel) else "v-no" if n_yes == 0 else "v-part"
    lis = ""
    if detail:
        irrelevant = [x for x in rel if x.get("verdict") != "yes" and x.get("statement")]
        items = "".join(f"<li>{e(x.get('statement'))} <span class='reason'>({e(x.get('reason', ''))})</span></li>"
                        for x in irrelevant[:5])
        lis = f"<ul class='small'>{items}</ul>" if items else ""
    return f"<td class='{cls}'>{n_yes}/{len(rel)}{lis}</td>"


def _node_table(nodes: list[Any], vd: _Verdicts) -> str:
    """The ranked nodes, each per-node metric's verdict in its own cell, coloured by that verdict."""
    if not nodes:
        return "<p class='small'>No retrieval context.</p>"
    head = "".join(f"<th>{e(m)}</th>" for m in vd.node_metrics)
    out = [f'<table class="cj-nodes"><thead><tr><th>Rank</th><th>Node</th>{head}'
           + ("<th>Relevant sentences</th>" if vd.relevancy else "") + "</tr></thead><tbody>"]
    for rank, node in enumerate(nodes, start=1):
        cells = "".join(_verdict_cell(vd.by_rank.get(m, {}).get(rank)) for m in vd.node_metrics)
        rel = _relevancy_cell(vd.relevancy.get(rank, [])) if vd.relevancy else ""
        out.append(f"<tr><td class='num'>{rank}</td><td><div class='text cj-s'>{e(_node_parts(node)[0])}</div>"
                   f"<div class='small'>{_node_meta(node)}</div></td>{cells}{rel}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


# --------------------------------------------------------------------------------------------------- rankings
def _ranking_block(final: list[Any], ranking: Any) -> str:
    """The retriever's own ranking against what the LLM saw: which nodes moved, which were dropped."""
    if not isinstance(ranking, list):
        return ""
    n_final = len(final)
    rows = []
    moved = dropped = 0
    for r, node in enumerate(ranking, start=1):
        pos = _find(node, final)
        if pos is None:
            dropped += 1
            where, cls, change = "dropped", "dropped", "dropped"
        else:
            where = f"#{pos + 1}"
            delta = r - (pos + 1)
            moved += delta != 0
            cls = "up" if delta > 0 else "down" if delta < 0 else "same"
            change = f"up {delta}" if delta > 0 else f"down {-delta}" if delta < 0 else "same"
        rows.append(f"<tr class='rk-{cls}' data-change='{cls}'><td class='num'>{r}</td><td><div class='text cj-s'>"
                    f"{e(_node_parts(node)[0])}</div><div class='small'>{_node_meta(node)}</div></td>"
                    f"<td class='num'>{where}</td><td class='{cls}'>{change}</td></tr>")
    added = [(p, node) for p, node in enumerate(final, start=1) if _find(node, ranking) is None]
    for p, node in added:
        rows.append(f"<tr class='rk-added' data-change='added'><td class='num'>-</td><td><div class='text cj-s'>"
                    f"{e(_node_parts(node)[0])}</div><div class='small'>{_node_meta(node)}</div></td>"
                    f"<td class='num'>#{p}</td><td class='added'>added</td></tr>")
    if n_final == 0:
        what = (f"<p class='cj-empty-final err'>Postprocessors left no node: the LLM saw no retrieved context "
                f"(scored as an empty context). The retriever had returned {len(ranking)} node(s).</p>")
        counts = f"{len(ranking)} retrieved, none kept"
    else:
        what = ""
        counts = (f"{len(ranking)} retrieved, {n_final} kept: {dropped} dropped, {moved} moved"
                  + (f", {len(added)} added or rewritten" if added else ""))
    return (what + "<details class='cj-ranking'" + (" open" if n_final == 0 else "") + "><summary><b>Retriever's "
            f"ranking against the final one</b> (reranker and postprocessors): <span class='cj-rank-counts'>"
            f"{counts}</span></summary>"
            + '<table class="cj-rerank"><thead><tr><th>Retriever rank</th><th>Node</th><th>Final rank</th>'
            "<th>Change</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></details>")


def _baseline_block(cur_nodes: list[Any], cur_vd: _Verdicts, base_nodes: list[Any], base_vd: _Verdicts,
                    label: str) -> str:
    """This run's ranked nodes beside the baseline's, rank by rank, with where each node sits in the other run."""
    metrics = list(dict.fromkeys(cur_vd.node_metrics + base_vd.node_metrics))
    rel = bool(cur_vd.relevancy or base_vd.relevancy)

    def side(nodes: list[Any], vd: _Verdicts, rank: int, others: list[Any], cls: str, gone: str) -> str:
        if rank > len(nodes):
            return f"<td class='{cls}' colspan='{2 + len(metrics) + rel}'></td>"
        node = nodes[rank - 1]
        pos = _find(node, others)
        where = gone if pos is None else ("same rank" if pos + 1 == rank else f"#{pos + 1} there")
        cells = "".join(_verdict_cell(vd.by_rank.get(m, {}).get(rank), with_reason=False) for m in metrics)
        relc = _relevancy_cell(vd.relevancy.get(rank, []), detail=False) if rel else ""
        return (f"<td class='{cls}'><div class='text clip'>{e(_node_parts(node)[0])}</div></td>"
                f"<td class='small'>{where}</td>{cells}{relc}")

    mh = "".join(f"<th>{e(m)}</th>" for m in metrics) + ("<th>Relevant</th>" if rel else "")
    head = (f"<tr><th rowspan='2'>Rank</th><th colspan='{2 + len(metrics) + rel}'>This run</th>"
            f"<th colspan='{2 + len(metrics) + rel}'>{e(label)}</th></tr>"
            f"<tr><th>Node</th><th>In baseline</th>{mh}<th>Node</th><th>In this run</th>{mh}</tr>")
    rows = []
    for rank in range(1, max(len(cur_nodes), len(base_nodes)) + 1):
        rows.append(f"<tr><td class='num'>{rank}</td>"
                    + side(cur_nodes, cur_vd, rank, base_nodes, "cur", "new")
                    + side(base_nodes, base_vd, rank, cur_nodes, "base", "gone") + "</tr>")
    if not rows:
        return ""
    return (f"<div class='field'><b>Ranked nodes: this run and {e(label)}</b></div>"
            f'<table class="cj-baseline-nodes"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>')


# --------------------------------------------------------------------------------------------------- provenance
def _field(label: str, value: Any) -> str:
    return f"<div class='field'><b>{e(label)}</b><span class='text cj-s'>{e(value)}</span></div>"


def _agent_block(meta_owner: Any) -> str:
    agent = agent_of(meta_owner)
    if not agent:
        return ""
    call = agent.get("call")
    who = ", ".join(str(agent[k]) for k in ("agent", "framework") if agent.get(k))
    if not agent.get("tool"):  # a plain retrieval from a graph node or a workflow step: no tool was called
        node = agent.get("node")
        where = str(node) + (f" (retrieval {call} in the turn)" if isinstance(call, int) and call > 1 else "") if node else None
        parts = ["<div class='cj-agent cj-node'><div class='small'>From a graph node"
                 + (f": {e(who)}" if who else "") + "</div>"]
        if where:
            parts.append(_field("Node", where))
        if agent.get("tool_input") is not None:
            parts.append(_field("Query", agent["tool_input"]))
    else:
        tool = str(agent["tool"]) + (f" (call {call} in the turn)" if call else "")
        parts = ["<div class='cj-agent'><div class='small'>From an agent's tool call"
                 + (f": {e(who)}" if who else "") + "</div>", _field("Tool", tool)]
        if agent.get("node"):
            parts.append(_field("Node", agent["node"]))
        if agent.get("tool_input") is not None:
            parts.append(_field("Tool query", agent["tool_input"]))
    if agent.get("tool_output") is not None:
        parts.append(_field("Tool answer", agent["tool_output"]))
    if agent.get("thread_id") is not None:
        parts.append(_field("Thread", agent["thread_id"]))
    parts.append("</div>")
    return "".join(parts)


def _provenance(meta_owner: Any) -> str:
    meta = getattr(meta_owner, "additional_metadata", None) or {}
    parts = [_agent_block(meta_owner)]
    if meta.get(RETRIEVER_KEY):
        parts.append(_field("Retriever", meta[RETRIEVER_KEY]))
    other = {k: v for k, v in meta.items() if k not in _KNOWN_META} if isinstance(meta, dict) else {}
    if other:
        shown = ", ".join(f"{k}={short(v, 80)}" for k, v in list(other.items())[:8])
        parts.append(f"<div class='field small'><b>Metadata</b>{e(short(shown, 400))}</div>")
    return "".join(parts)


# --------------------------------------------------------------------------------------------------- a case
def _statements(m: MetricResult) -> str:
    items = [v for v in m.verdicts if isinstance(v, dict) and "statement" in v and "supporting_ranks" in v]
    if not items:
        return ""
    unsupported = (m.details or {}).get("unsupported_statements")
    lis = []
    for v in items:
        ok = v.get("verdict") == "yes"
        ranks = ", ".join(str(r) for r in v.get("supporting_ranks") or [])
        where = f" <span class='small'>supported by rank {ranks}</span>" if ok and ranks else ""
        turn = (f"<span class='small'>exchange {v['exchange']}: </span>" if "exchange" in v else
                f"<span class='small'>turn {v['turn']}: </span>" if "turn" in v else "")
        lis.append(f"<li class='{'supported' if ok else 'unsupported'}'>{turn}<span class='verdict "
                   f"{'yes' if ok else 'no'}'>{'supported' if ok else 'unsupported'}</span> "
                   f"{e(v.get('statement'))}{where} <span class='reason'>{e(v.get('reason', ''))}</span></li>")
    extra = ""
    if unsupported:
        extra = ("<div class='field'><b>Unsupported statements</b><ul class='cj-unsupported'>"
                 + "".join(f"<li>{e(s)}</li>" for s in unsupported) + "</ul></div>")
    return f"<div class='field'><b>{e(m.name)}: statements</b><ul class='stmts'>{''.join(lis)}</ul></div>{extra}"


def _turn_ids(tc: ConversationalTestCase, metrics: list[MetricResult]) -> dict[Any, int]:
    """How this case's turn verdicts name a turn -> its index in ``turns``. The turn metrics key a verdict by the
    turn's index in the list (``turn``; results stored by any version). Should a verdict name its turn otherwise
    (values that are not all indices of assistant turns), they are read as exchange numbers, the k-th assistant
    turn."""
    assistants = [i for i, t in enumerate(tc.turns) if t.role == "assistant"]
    seen = {v.get("turn") for m in metrics for v in m.verdicts if isinstance(v, dict) and "turn" in v}
    if all(isinstance(t, int) and t in assistants for t in seen):
        return {i: i for i in range(len(tc.turns))}
    return {k: i for k, i in enumerate(assistants, start=1)}


def _has_error(tr: TestResult) -> bool:
    return bool(tr.error) or any(m.error for m in tr.metrics_data) or app_error_of(tr.test_case) is not None


def _changed(tr: TestResult, base: TestResult | None) -> bool:
    if base is None:
        return False
    cur_s = {m.name: m.score for m in tr.metrics_data}
    base_s = {m.name: m.score for m in base.metrics_data}
    if any(cur_s.get(k) != base_s.get(k) for k in set(cur_s) & set(base_s)):
        return True
    return _node_lists(tr.test_case) != _node_lists(base.test_case)


def _node_lists(tc: Any) -> list[list[str]]:
    if isinstance(tc, ConversationalTestCase):
        return [[node_key(n) for n in t.retrieval_context or []] for t in tc.turns]
    return [[node_key(n) for n in tc.retrieval_context or []]]


def _attrs(tr: TestResult, ctx: CaseContext) -> str:
    """The data attributes the script filters and sorts on (the same on a case's row and on its card: worked out
    once per case)."""
    if tr.index not in ctx.attrs:
        ctx.attrs[tr.index] = _make_attrs(tr, ctx)
    return ctx.attrs[tr.index]


def _make_attrs(tr: TestResult, ctx: CaseContext) -> str:
    fail, err = [], []
    scores: dict[int, str] = {}
    for m in tr.metrics_data:
        k = ctx.columns.get(m.name)
        if k is None:
            continue
        if m.error:
            err.append(str(k))
            scores[k] = "err"
        else:
            scores[k] = "na" if m.score is None else repr(float(m.score))
        if not m.success:
            fail.append(str(k))
    attrs = [f"data-i='{tr.index}'", f"data-failing='{0 if tr.success else 1}'",
             f"data-error='{1 if _has_error(tr) else 0}'", f"data-fail='{' '.join(fail)}'",
             f"data-err='{' '.join(err)}'"]
    attrs += [f"data-m{k}='{scores.get(k, 'na')}'" for k in range(len(ctx.metrics))]
    if ctx.baseline is not None:
        base = ctx.baseline.get(tr.index)
        attrs.append(f"data-changed='{1 if ctx.is_changed(tr) else 0}'")
        if base is not None:
            for k, name in enumerate(ctx.metrics):
                sc, sb = _score(tr, name), _score(base, name)
                if sc is not None and sb is not None:
                    attrs.append(f"data-d{k}='{sc - sb!r}'")
    return " ".join(attrs)


def _score(tr: TestResult, name: str) -> float | None:
    for m in tr.metrics_data:
        if m.name == name:
            return m.score
    return None


def _title(tr: TestResult) -> str:
    return short(tr.name or case_input(tr.test_case))


def _badges(tr: TestResult, ctx: CaseContext) -> str:
    out = []
    if ctx.baseline is not None and tr.index not in ctx.baseline:
        out.append("<span class='badge new'>not in the baseline</span>")
    agent = agent_of(tr.test_case)
    if agent:
        if agent.get("tool"):
            out.append(f"<span class='badge agent'>tool {e(agent['tool'])}</span>")
        elif agent.get("node"):
            out.append(f"<span class='badge agent'>node {e(agent['node'])}</span>")
    if app_error_of(tr.test_case) is not None:
        out.append("<span class='badge err'>app error</span>")
    elif _has_error(tr):
        out.append("<span class='badge err'>error</span>")
    meta = getattr(tr.test_case, "additional_metadata", None) or {}
    if isinstance(meta, dict) and isinstance(meta.get(RETRIEVER_RANKING_KEY), list):
        kept = len(getattr(tr.test_case, "retrieval_context", None) or [])
        out.append(f"<span class='badge rerank'>{'no node kept' if kept == 0 else 'reranked'}</span>")
    return "".join(out)


def case_row(tr: TestResult, ctx: CaseContext) -> str:
    """The case's row in the cases table: each metric's cell coloured by that metric's own result."""
    by_name = {m.name: m for m in tr.metrics_data}
    base = ctx.baseline.get(tr.index) if ctx.baseline is not None else None
    cells = []
    for name in ctx.metrics:
        m = by_name.get(name)
        if m is None:
            cells.append("<td class='num m-na'>n/a</td>")
            continue
        cls, word = status(m)
        shown = "error" if m.error else num(m.score, 2)
        delta = ""
        if base is not None and m.score is not None and (sb := _score(base, name)) is not None and sb != m.score:
            delta = f" <span class='small {'up' if m.score > sb else 'down'}'>{signed(m.score - sb)}</span>"
        tip = m.error or m.reason or ""
        cells.append(f"<td class='num m-{cls}' data-status='{word}' title='{e(short(tip, 300))}'>{shown}{delta}</td>")
    return (f"<tr class='cj-row' {_attrs(tr, ctx)}><td class='num'><a href='#case-{tr.index}'>#{tr.index + 1}</a>"
            f"</td><td>{e(_title(tr))} {_badges(tr, ctx)}</td>{''.join(cells)}</tr>")


def _errors_block(tr: TestResult) -> str:
    parts = []
    app = app_error_of(tr.test_case)
    if app is not None:
        parts.append(f"<div class='field err cj-app-error'><b>App error</b><span class='text cj-s'>the app raised "
                     f"{e(app.get('type') or 'an error')} on this golden: {e(app.get('message'))}</span></div>")
    if tr.error:
        parts.append(f"<div class='field err cj-case-error'><b>Error</b><span class='text cj-s'>{e(tr.error)}"
                     "</span></div>")
    return "".join(parts)


def case_card(tr: TestResult, ctx: CaseContext) -> str:
    """The case's card: what it is, where it came from, its errors, its nodes and every metric's result."""
    tc = tr.test_case
    base = ctx.baseline.get(tr.index) if ctx.baseline is not None else None
    chips = []
    for m in tr.metrics_data:
        cls, _ = status(m)
        chips.append(f"<span class='chip {cls}' title='{e(m.reason or m.error or '')}'>{e(m.name)} "
                     f"{'error' if m.error else num(m.score, 2)}</span>")
    failed = not tr.success
    parts = [f"<details class='case' id='case-{tr.index}' {_attrs(tr, ctx)}"
             f"{' open' if failed and tr.index < 3 else ''}>"
             f"<summary><b>#{tr.index + 1}</b> <span class='cj-s'>{e(_title(tr))}</span> {_badges(tr, ctx)} "
             f"{''.join(chips)}</summary>", _errors_block(tr)]
    if tr.name:
        parts.append(f"<span class='cj-s' hidden>{e(tr.name)}</span>")
    if isinstance(tc, ConversationalTestCase):
        parts.append(_provenance(tc))
        ids = _turn_ids(tc, tr.metrics_data)
        base_tc = base.test_case if base is not None and isinstance(base.test_case, ConversationalTestCase) else None
        base_ids = _turn_ids(base_tc, base.metrics_data) if base_tc is not None and base is not None else None
        users = 0
        for i, turn in enumerate(tc.turns):
            label: str = turn.role
            if turn.role == "user":
                users += 1
            elif turn.role == "assistant":  # exchanges numbered as the turn metrics number them
                label = f"assistant (exchange {max(1, users)})"
            parts.append(_field(label, turn.content))
            parts.append(_provenance(turn))
            if turn.retrieval_context is not None or turn.additional_metadata:
                nodes = turn.retrieval_context or []
                vd = _verdicts(tr.metrics_data, i, ids)
                if nodes:
                    parts.append(_node_table(nodes, vd))
                parts.append(_ranking_block(nodes, (turn.additional_metadata or {}).get(RETRIEVER_RANKING_KEY)))
                if base_tc is not None and base is not None and i < len(base_tc.turns) and ctx.is_changed(tr):
                    bnodes = base_tc.turns[i].retrieval_context or []
                    parts.append(_baseline_block(nodes, vd, bnodes, _verdicts(base.metrics_data, i, base_ids),
                                                 ctx.baseline_label))
        if tc.expected_outcome:
            parts.append(_field("Expected outcome", tc.expected_outcome))
    else:
        for label, val in (("Input", tc.input), ("Actual output", tc.actual_output),
                           ("Expected output", tc.expected_output)):
            if val is not None:
                parts.append(_field(label, val))
        parts.append(_provenance(tc))
        nodes = tc.retrieval_context or []
        vd = _verdicts(tr.metrics_data)
        ranking = (tc.additional_metadata or {}).get(RETRIEVER_RANKING_KEY)
        if nodes or (ranking is None and app_error_of(tc) is None):
            parts.append(_node_table(nodes, vd))
        parts.append(_ranking_block(nodes, ranking))
        if base is not None and ctx.is_changed(tr) and not isinstance(base.test_case, ConversationalTestCase):
            parts.append(_baseline_block(nodes, vd, base.test_case.retrieval_context or [],
                                         _verdicts(base.metrics_data), ctx.baseline_label))
    if base is not None:
        parts.append(_baseline_scores(tr, base, ctx))
    for m in tr.metrics_data:
        cls, word = status(m)
        parts.append(f"<div class='field cj-metric' data-metric='{e(m.name)}'><b>{e(m.name)}</b>"
                     f"<span class='{cls}'>{word}</span> score {num(m.score)} / threshold {num(m.threshold, 2)}"
                     + (f" · judge {e(m.evaluation_model)}" if m.evaluation_model else "")
                     + (f"<div class='reason'>{e(m.reason)}</div>" if m.reason else "")
                     + (f"<div class='reason err cj-error'>{e(m.error_type + ': ' if m.error_type else '')}"
                        f"<span class='cj-s'>{e(m.error)}</span></div>" if m.error else "") + "</div>")
        parts.append(_statements(m))
    parts.append("</details>")
    return "".join(parts)


def _baseline_scores(tr: TestResult, base: TestResult, ctx: CaseContext) -> str:
    by_base = {m.name: m for m in base.metrics_data}
    items = []
    for m in tr.metrics_data:
        b = by_base.get(m.name)
        if b is None:
            continue
        bs = "error" if b.error else num(b.score)
        cs = "error" if m.error else num(m.score)
        delta = ""
        if m.score is not None and b.score is not None and m.score != b.score:
            delta = f" <span class='{'up' if m.score > b.score else 'down'}'>{signed(m.score - b.score)}</span>"
        items.append(f"<li>{e(m.name)}: {bs} → {cs}{delta}</li>")
    if not items:
        return ""
    return (f"<div class='field cj-vs-baseline'><b>Against {e(ctx.baseline_label)}</b><ul class='small'>"
            + "".join(items) + "</ul></div>")
