"""The labelling page of ``contextjudge label --serve``: one self-contained HTML document (inline style and one inline
script allowed by its hash in the Content-Security-Policy, as the report's; nothing loaded from elsewhere).

The page holds no case text: its script asks the local server for the cases and figures (JSON) and puts every piece
of text in with ``textContent``, never as markup, so a case whose text holds markup or script shows it as text. The
little server-side text in the page goes through the report's ``e`` escaping."""

from __future__ import annotations

import base64
import hashlib

from ._format import e

__all__ = ["LABEL_PAGE_CSP", "render_label_page"]

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{display:flex;gap:1em;align-items:center;padding:.5em 1em;background:#1d2330;color:#fff;flex-wrap:wrap}
header select,header input{font:inherit}
main{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:1em;padding:1em}
section{background:#fff;border:1px solid #d8dce3;border-radius:6px;padding:.8em 1em}
h2{font-size:1em;margin:.2em 0 .5em}
.txt{white-space:pre-wrap;word-break:break-word;margin:.2em 0 .8em}
.row{border:1px solid #e3e6eb;border-radius:5px;padding:.4em .6em;margin:.4em 0}
.row.sel{outline:3px solid #3b6fd8}
.src{color:#5b6475;font-size:.85em}
button{font:inherit;font-size:.85em;margin:.15em;padding:.1em .6em;border:1px solid #aab;border-radius:4px;
background:#fff;cursor:pointer}
button.on-yes{background:#2e8540;color:#fff}button.on-no{background:#b3261e;color:#fff}
table{border-collapse:collapse;font-size:.85em;width:100%}td,th{border-bottom:1px solid #e3e6eb;padding:.2em .3em;
text-align:left}
kbd{border:1px solid #aab;border-radius:3px;padding:0 .3em;background:#fff;color:#1d2330}
#status{margin-left:auto}.err{color:#b3261e}#unsaved{color:#ffd54a}
dl{margin:.4em 0}dd{margin:0 0 .3em 1em}
textarea{width:100%;font:inherit;box-sizing:border-box}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var token = new URLSearchParams(location.search).get("t") || "";
  var st = {queue: localStorage.getItem("cj-queue") || "calibrate", who: localStorage.getItem("cj-who") || "",
            queues: null, pos: {calibrate: 0, estimate: 0}, c: null, rows: [], sel: 0, undo: [],
            outbox: [], busy: false, tries: 0, saved: 0};
  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) { var n = document.createElement(tag); if (text !== undefined && text !== null) {
    n.textContent = String(text); } if (cls) { n.className = cls; } return n; }
  function request(path, body) {
    var url = path + (path.indexOf("?") < 0 ? "?" : "&") + "t=" + encodeURIComponent(token);
    var opt = {headers: {"X-CJ-Token": token}, cache: "no-store"};
    /* keepalive: a label on its way when the tab closes still arrives */
    if (body !== undefined) { opt.method = "POST"; opt.body = JSON.stringify(body); opt.keepalive = true;
      opt.headers["Content-Type"] = "application/json"; }
    return fetch(url, opt);
  }
  function api(path, body) {
    return request(path, body).then(function (r) { return r.json().then(function (j) {
      if (!r.ok) { var x = new Error(j.error || r.status); x.status = r.status; throw x; } return j; },
      function () { var x = new Error("HTTP " + r.status); x.status = r.status; throw x; }); });
  }
  function status(msg, bad) { var s = $("status"); s.textContent = msg; s.className = bad ? "err" : ""; }
  function keys() { return st.queues ? st.queues[st.queue] : []; }
  function current() { return keys()[st.pos[st.queue]]; }
  function load() {
    var k = current();
    st.c = null; render();  /* no key may label the case left behind while the next one loads */
    if (k === undefined) { return Promise.resolve(); }
    return api("/api/case?key=" + encodeURIComponent(k)).then(function (c) {
      if (current() === c.key) { st.c = c; render(); } });
  }
  /* where a row's label sits in a case: a node's field, or an expected-output ("stmt") or answer ("ans") statement */
  function slot(c, row) { return row.kind === "node" ? [c.nodes[row.i].labels, row.field] :
    [row.kind === "ans" ? c.answer_statements[row.i] : c.statements[row.i], "label"]; }
  function labelOf(row) { var s = slot(st.c, row); return s[0][s[1]]; }
  function give(row, value, isUndo) {
    var c = st.c, prev = labelOf(row), s = slot(c, row);
    var item = row.kind === "node" ? {id: c.nodes[row.i].ref.id, hash: c.nodes[row.i].ref.hash,
      text: c.nodes[row.i].text.slice(0, 200)} : s[0].text;
    if (!isUndo) { st.undo.push({key: c.key, row: row, item: item, prev: prev}); }
    s[0][s[1]] = value;
    render();
    send({key: c.key, field: row.field, item: item, value: value});
  }
  /* labels wait in the outbox until the server has them: sent one at a time in the order given, a failed one
     retried (the server down, a busy store) with growing pauses; one the server refuses (4xx) is dropped and said */
  function mark() {
    var n = st.outbox.length;
    document.body.setAttribute("data-cj-pending", String(n));
    document.body.setAttribute("data-cj-saved", String(st.saved));
    $("unsaved").textContent = n ? n + " unsaved" : "";
  }
  function send(body) {
    body.queue = st.queue; body.who = st.who || null;
    st.outbox.push(body); mark(); pump();
  }
  function pump() {
    if (st.busy || !st.outbox.length) { return; }
    st.busy = true;
    var wait = 0;
    api("/api/label", st.outbox[0]).then(function () {
      st.outbox.shift(); st.tries = 0; st.saved += 1; status("saved " + st.saved + " label(s)"); figures();
    }, function (err) {
      if (err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429) {
        st.outbox.shift(); status("not saved: " + err.message + " (give it again)", true);
      } else {
        st.tries += 1; wait = Math.min(5000, 250 * Math.pow(2, st.tries));
        status("not saved yet: " + err.message + "; trying again", true);
      }
    }).then(function () { st.busy = false; mark(); if (wait) { setTimeout(pump, wait); } else { pump(); } });
  }
  /* leaving with labels unsaved: the browser asks first; when the page goes, the waiting labels go with it (the
     latest of each item, as keepalive requests that outlive the page) */
  window.addEventListener("beforeunload", function (ev) {
    if (st.outbox.length) { ev.preventDefault(); ev.returnValue = ""; return ""; }
  });
  window.addEventListener("pagehide", function () {
    var last = {}, order = [];
    st.outbox.slice(st.busy ? 1 : 0).forEach(function (b) {
      var id = JSON.stringify([b.key, b.field, b.who, b.item && b.item.hash !== undefined ? [b.item.id, b.item.hash] : b.item,
        b.field === "note" ? order.length : 0]);
      if (!(id in last)) { order.push(id); } last[id] = b;
    });
    order.forEach(function (id) { request("/api/label", last[id]).catch(function () {}); });
    st.outbox = st.outbox.slice(0, st.busy ? 1 : 0);  /* handed over: never sent twice if the page comes back */
  });
  function undo() {
    var u = st.undo.pop(); if (!u) { status("nothing to undo"); return; }
    if (st.c && st.c.key === u.key) {
      var s = slot(st.c, u.row); s[0][s[1]] = u.prev;
      render();
    }
    send({key: u.key, field: u.row.field, item: u.item, value: u.prev});
  }
  function move(d) { var n = keys().length; st.pos[st.queue] = Math.max(0, Math.min(n, st.pos[st.queue] + d));
    st.sel = 0; load(); }
  function btn(text, on, cls, f) { var b = el("button", text, on ? cls : ""); b.type = "button";
    b.addEventListener("click", f); return b; }
  function yesno(row, names) {
    var v = labelOf(row), span = el("span");
    span.appendChild(el("span", names[0] + ": ", "src"));
    span.appendChild(btn(names[1], v === true, "on-yes", function () { give(row, true); }));
    span.appendChild(btn(names[2], v === false, "on-no", function () { give(row, false); }));
    return span;
  }
  function render() {
    var box = $("case"); box.textContent = "";
    $("where").textContent = st.queues ? (st.queue + ": case " + Math.min(st.pos[st.queue] + 1, keys().length) +
      " of " + keys().length) : "";
    box.removeAttribute("data-key"); st.rows = [];
    if (!st.c) { box.appendChild(el("p", st.queues && current() === undefined ? "No more cases in this queue." :
      "Loading ...")); return; }
    var c = st.c; st.rows = [];
    box.setAttribute("data-key", c.key);
    [["Question", c.input], ["Expected output", c.expected_output], ["Actual output", c.actual_output]].forEach(
      function (p) { box.appendChild(el("h2", p[0])); box.appendChild(el("div", p[1] === null ? "(none)" : p[1], "txt")); });
    box.appendChild(el("h2", "Retrieved nodes, in rank order"));
    c.nodes.forEach(function (n, i) {
      var idx = st.rows.length; st.rows.push({kind: "node", i: i, field: "labels"});
      var d = el("div", null, "row" + (idx === st.sel ? " sel" : "")); d.setAttribute("data-row", String(idx));
      d.appendChild(el("div", "#" + n.rank + (n.source ? "  " + n.source : ""), "src"));
      d.appendChild(el("div", n.text, "txt"));
      d.appendChild(yesno({kind: "node", i: i, field: "labels"}, ["useful (1/2)", "yes", "no"]));
      d.appendChild(yesno({kind: "node", i: i, field: "relevance_labels"}, ["relevant (3/4)", "yes", "no"]));
      if (c.actual_output !== null) {
        d.appendChild(yesno({kind: "node", i: i, field: "utilization_labels"}, ["used (5/6)", "yes", "no"])); }
      box.appendChild(d);
    });
    if (c.statements.length) { box.appendChild(el("h2", "Statements of the expected output: supported by the nodes?")); }
    c.statements.forEach(function (s, i) {
      var idx = st.rows.length, row = {kind: "stmt", i: i, field: "statement_labels"}; st.rows.push(row);
      var d = el("div", null, "row" + (idx === st.sel ? " sel" : "")); d.setAttribute("data-row", String(idx));
      d.appendChild(el("div", s.text, "txt")); d.appendChild(yesno(row, ["supported (1/2)", "yes", "no"]));
      box.appendChild(d);
    });
    if (c.answer_statements.length) {
      box.appendChild(el("h2", "Statements of the actual output: supported by the nodes? (faithfulness)")); }
    c.answer_statements.forEach(function (s, i) {
      var idx = st.rows.length, row = {kind: "ans", i: i, field: "answer_statement_labels"}; st.rows.push(row);
      var d = el("div", null, "row ans" + (idx === st.sel ? " sel" : "")); d.setAttribute("data-row", String(idx));
      d.appendChild(el("div", s.text, "txt")); d.appendChild(yesno(row, ["supported (1/2)", "yes", "no"]));
      box.appendChild(d);
    });
    var sel = box.querySelector(".row.sel"); if (sel && sel.scrollIntoView) { sel.scrollIntoView({block: "nearest"}); }
    document.body.setAttribute("data-cj-ready", "1");
  }
  function fmt(x) { return x === null || x === undefined ? "n/a" : Number(x).toFixed(3); }
  function ci(x, iv) { return fmt(x) + (iv ? " [" + Number(iv[0]).toFixed(2) + ", " + Number(iv[1]).toFixed(2) + "]" : ""); }
  function cell(tr, text, fam, k) { var td = el("td", text); if (k) { td.setAttribute("data-fam", fam);
    td.setAttribute("data-k", k); } tr.appendChild(td); }
  function figures() {
    return api("/api/figures").then(function (f) {
      var box = $("figures"); box.textContent = ""; var r = f.calibrate;
      var given = el("p", "labels given: " + f.labels.calibrate + " from calibrate, " + f.labels.estimate +
        " from estimate (each item once, however often relabelled; only estimate-queue cases enter the " +
        "bias-corrected means)", "src"); given.id = "given"; box.appendChild(given);
      if (!r) { box.appendChild(el("p", "No labelled case yet.")); }
      else {
        box.appendChild(el("h2", "Judge " + r.judge + " against your labels (" + r.cases + " cases)"));
        var t = el("table"), h = el("tr");
        ["family", "items", "kappa", "TPR", "TNR", "more cases for width " + f.target_width].forEach(function (x) {
          h.appendChild(el("th", x)); });
        t.appendChild(h);
        (f.families || []).forEach(function (fam) {
          var x = r[fam]; if (!x) { return; } var tr = el("tr");
          cell(tr, fam); cell(tr, x.items, fam, "items"); cell(tr, ci(x.kappa, x.kappa_ci), fam, "kappa");
          cell(tr, ci(x.tpr, x.tpr_ci), fam, "tpr"); cell(tr, ci(x.tnr, x.tnr_ci), fam, "tnr");
          cell(tr, f.needed[fam] === undefined ? "n/a" : f.needed[fam], fam, "needed"); t.appendChild(tr);
        });
        box.appendChild(t);
        (r.advice || []).forEach(function (a) { var p = el("p", a.metric + ": " + a.advice + " (" + a.why + ")");
          p.setAttribute("data-advice", a.metric); box.appendChild(p); });
      }
      var cm = Object.keys(f.corrected || {});
      if (cm.length) {
        box.appendChild(el("h2", "Bias-corrected means (estimate queue)"));
        cm.forEach(function (m) { var v = f.corrected[m]; box.appendChild(el("p", m + ": " + (v ? ci(v.corrected.estimate,
          v.corrected.low === null ? null : [v.corrected.low, v.corrected.high]) + " from " + v.n_labelled +
          " labelled (judged " + fmt(v.judged.estimate) + ")" : "not yet: needs two estimate-queue cases labelled and one not"))); });
      }
      if (f.annotators.length) {
        box.appendChild(el("h2", "Annotators against each other (the honest ceiling)"));
        f.annotators.forEach(function (a) { var p = el("p", a.field + ": " + a.a + " vs " + a.b + ": kappa " +
          fmt(a.kappa) + " on " + a.items + " items"); p.setAttribute("data-pair", a.field); box.appendChild(p); });
      }
      document.body.setAttribute("data-cj-figures", String(f.labels.calibrate + f.labels.estimate));
    }, function (err) { status("figures: " + err.message, true); });
  }
  function key(ev) {
    if (ev.target && (ev.target.tagName === "TEXTAREA" || ev.target.tagName === "INPUT")) {
      if (ev.key === "Escape") { ev.target.blur(); } return; }
    var row = st.rows[st.sel], k = ev.key;
    if (k === "j" || k === "ArrowDown") { st.sel = Math.min(st.rows.length - 1, st.sel + 1); render(); }
    else if (k === "k" || k === "ArrowUp") { st.sel = Math.max(0, st.sel - 1); render(); }
    else if ((k === "1" || k === "2") && row) { give(row, k === "1"); }
    else if ((k === "3" || k === "4") && row && row.kind === "node") {
      give({kind: "node", i: row.i, field: "relevance_labels"}, k === "3"); }
    else if ((k === "5" || k === "6") && row && row.kind === "node" && st.c.actual_output !== null) {
      give({kind: "node", i: row.i, field: "utilization_labels"}, k === "5"); }
    else if (k === "n" || k === "s") { move(1); }
    else if (k === "p") { move(-1); }
    else if (k === "u" || k === "z") { undo(); }
    else if (k === "q") { st.queue = st.queue === "calibrate" ? "estimate" : "calibrate"; $("queue").value = st.queue;
      localStorage.setItem("cj-queue", st.queue); st.sel = 0; load(); }
    else if (k === "o") { $("note").focus(); }
    else { return; }
    ev.preventDefault();
  }
  $("note").addEventListener("change", function () {
    if (!st.c || !$("note").value) { return; }
    send({key: st.c.key, field: "note", item: "", value: null, note: $("note").value}); $("note").value = "";
  });
  $("queue").value = st.queue;
  $("queue").addEventListener("change", function () { st.queue = $("queue").value; localStorage.setItem("cj-queue", st.queue);
    st.sel = 0; load(); });
  $("who").value = st.who;
  $("who").addEventListener("change", function () { st.who = $("who").value; localStorage.setItem("cj-who", st.who); });
  document.addEventListener("keydown", key);
  api("/api/queues").then(function (q) {
    st.queues = q.queues;
    var want = new URLSearchParams(location.search).get("key");
    if (want !== null && keys().indexOf(want) >= 0) { st.pos[st.queue] = keys().indexOf(want); }
    return load(); }).then(figures, function (err) {
    status(err.message, true); });
  setInterval(figures, 5000);
})();
"""

_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")

LABEL_PAGE_CSP = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_HASH}'; "
                  "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'")


def render_label_page(title: str = "contextjudge labelling") -> str:
    """The labelling page (static: the cases come from the server as JSON)."""
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{LABEL_PAGE_CSP}\">"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>"
        f"<header><strong>{e(title)}</strong>"
        "<label>queue <select id='queue'><option value='calibrate'>calibrate (most informative first)</option>"
        "<option value='estimate'>estimate (random draw)</option></select></label>"
        "<label>your name <input id='who' size='10'></label><span id='where'></span><span id='status'></span>"
        "<strong id='unsaved' role='status'></strong>"
        "</header><main><section id='case'><p>Loading ...</p></section><div><section id='figures'></section>"
        "<section><h2>Note on this case</h2><textarea id='note' rows='2' placeholder='o to write, Esc to save'>"
        "</textarea><p class='src'><kbd>j</kbd>/<kbd>k</kbd> next/previous item, <kbd>1</kbd>/<kbd>2</kbd> useful "
        "(or, on a statement of the expected or actual output, supported) yes/no, <kbd>3</kbd>/<kbd>4</kbd> "
        "relevant yes/no, <kbd>5</kbd>/<kbd>6</kbd> used yes/no, <kbd>n</kbd> next case (skip), "
        "<kbd>p</kbd> previous case, <kbd>u</kbd> undo, <kbd>q</kbd> switch queue, <kbd>o</kbd> note. Every label "
        "is sent the moment you give it; until the store has it the header counts it as unsaved (retried until "
        "it is), and leaving the page then asks first.</p>"
        "<dl class='src' id='meanings'>"
        "<dt><b>useful</b></dt><dd>the node helps give the <em>expected</em> answer: it holds a fact that answer "
        "states (contextual precision, the node's rank counts).</dd>"
        "<dt><b>relevant</b></dt><dd>the node is about the question, whether or not it answers it (contextual "
        "relevancy).</dd>"
        "<dt><b>used</b></dt><dd>the app's <em>actual</em> answer draws on the node (context utilization); only "
        "when the case has an answer.</dd>"
        "<dt><b>supported</b></dt><dd>the statement can be read in the retrieved nodes (recall for the expected "
        "output's statements, faithfulness for the answer's).</dd></dl></section></div></main>"
        f"<script>{SCRIPT}</script></body></html>")
