"""The report's one inline script: filter, sort and search the cases, and open the case a link points to.

Every case is rendered in the page; the script only hides and reorders what is there, so the report reads the same
with scripts off (cases in run order, the controls hidden). The script is a constant that never carries user text:
it reads the cases' ``data-*`` attributes and the text of their ``.cj-s`` elements. The Content-Security-Policy
allows this script by its hash and no other, so text injected through a case still cannot run.

What a case row and its card carry (the same attributes on both; ``k`` is the metric's column, 0-based):
``data-i`` (run order), ``data-failing`` and ``data-error`` ("1" or "0"), ``data-fail`` and ``data-err`` (the
columns that failed or errored, space-separated), ``data-m{k}`` (the score, "err", or "na" when the metric did not
apply), in a comparison ``data-changed`` and ``data-d{k}`` (this run's score minus the baseline's).

A link to a case (``#case-N``, from the case table or the error lists) opens that case's collapsed ``<details>``
when the page loads with it, when the hash changes, and when the link is clicked again; a case the filter or search
hides is shown again first (the filter goes back to "all").

Sorting by a metric puts scored cases first (worst first, or best first), then the cases where that metric errored,
then those it did not apply to, in both directions; ties keep the run order.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["CSP", "SCRIPT", "script_tag"]

SCRIPT = r"""
(function () {
  "use strict";
  var bar = document.getElementById("cj-toolbar");
  var table = document.getElementById("cj-cases");
  var list = document.getElementById("cj-case-list");
  var reveal = null;  // set below when the toolbar runs: shows a case its filter or search hides
  // a link to a case (#case-N) opens that case's <details> (and any it lies in), on load, on hashchange and on a
  // click on a link to the hash already in the address bar
  function openTarget(hash) {
    var id = (hash || "").charAt(0) === "#" ? hash.slice(1) : "";
    if (!id) { return; }
    try { id = decodeURIComponent(id); } catch (err) { return; }
    var el = document.getElementById(id);
    if (!el) { return; }
    if (reveal && el.hidden) { reveal(); }
    for (var d = el; d; d = d.parentElement) { if (d.tagName === "DETAILS") { d.open = true; } }
    el.scrollIntoView();
  }
  window.addEventListener("hashchange", function () { openTarget(location.hash); });
  document.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a[href^='#']") : null;
    if (a) { openTarget(a.getAttribute("href")); }
  });
  openTarget(location.hash);
  if (!bar || !table || !list) { return; }
  bar.hidden = false;
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var cards = {};
  var texts = {};
  Array.prototype.forEach.call(list.querySelectorAll("details.case"), function (card) {
    var i = card.getAttribute("data-i");
    cards[i] = card;
    var parts = [];
    Array.prototype.forEach.call(card.querySelectorAll(".cj-s"), function (el) { parts.push(el.textContent); });
    texts[i] = parts.join("\n").toLowerCase();
  });
  var state = { filter: "all", metric: "", sort: "", dir: 1, q: [] };
  var search = document.getElementById("cj-search");
  var metricSel = document.getElementById("cj-filter-metric");
  var sortSel = document.getElementById("cj-sort");
  var count = document.getElementById("cj-count");

  function has(row, attr, k) {
    var v = row.getAttribute(attr);
    return v ? v.split(" ").indexOf(k) >= 0 : false;
  }
  function keep(row) {
    var f = state.filter, k = state.metric, ok = true;
    if (f === "failing") { ok = k ? has(row, "data-fail", k) : row.getAttribute("data-failing") === "1"; }
    else if (f === "errors") { ok = k ? has(row, "data-err", k) : row.getAttribute("data-error") === "1"; }
    else if (f === "passing") {
      ok = k ? (/^[0-9.eE+-]+$/.test(row.getAttribute("data-m" + k) || "") && !has(row, "data-fail", k))
             : row.getAttribute("data-failing") === "0";
    }
    else if (f === "changed") {
      ok = k ? parseFloat(row.getAttribute("data-d" + k) || "0") !== 0 : row.getAttribute("data-changed") === "1";
    }
    if (ok && state.q.length) {
      var text = texts[row.getAttribute("data-i")] || "";
      for (var j = 0; j < state.q.length; j++) { if (text.indexOf(state.q[j]) < 0) { ok = false; break; } }
    }
    return ok;
  }
  function key(row) {
    var i = parseInt(row.getAttribute("data-i"), 10);
    if (!state.sort) { return [0, 0, i]; }
    var v = row.getAttribute("data-" + state.sort);
    if (v === "err") { return [1, 0, i]; }
    if (v === null || v === "" || v === "na") { return [2, 0, i]; }
    return [0, state.dir * parseFloat(v), i];
  }
  function compare(a, b) {
    for (var j = 0; j < 3; j++) { if (a.k[j] !== b.k[j]) { return a.k[j] < b.k[j] ? -1 : 1; } }
    return 0;
  }
  var sorted = null;
  function apply() {
    var now = state.sort + ":" + state.dir;
    if (sorted !== now) {  // reorder the page only when the order changed, not on every keystroke of a search
      rows = rows.map(function (r) { return { r: r, k: key(r) }; }).sort(compare).map(function (o) { return o.r; });
      rows.forEach(function (r) {
        body.appendChild(r);
        var card = cards[r.getAttribute("data-i")];
        if (card) { list.appendChild(card); }
      });
      sorted = now;
    }
    var shown = 0;
    rows.forEach(function (r) {
      var ok = keep(r), card = cards[r.getAttribute("data-i")];
      r.hidden = !ok;
      if (card) { card.hidden = !ok; }
      if (ok) { shown += 1; }
    });
    count.textContent = "showing " + shown + " of " + rows.length + " case(s)";
    Array.prototype.forEach.call(bar.querySelectorAll("button[data-filter]"), function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-filter") === state.filter ? "true" : "false");
    });
    Array.prototype.forEach.call(table.querySelectorAll("th[data-col]"), function (th) {
      var col = th.getAttribute("data-col");
      th.setAttribute("aria-sort", state.sort === col ? (state.dir > 0 ? "ascending" : "descending")
                                                        : (col === "" && !state.sort ? "ascending" : "none"));
    });
    if (sortSel) { sortSel.value = state.sort ? state.sort + ":" + state.dir : ""; }
    document.body.setAttribute("data-cj-ready", "1");
  }
  bar.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-filter]");
    if (b) { state.filter = b.getAttribute("data-filter"); apply(); }
  });
  table.tHead.addEventListener("click", function (ev) {
    var b = ev.target.closest("button[data-sort]");
    if (!b) { return; }
    var col = b.getAttribute("data-sort");
    if (col && state.sort === col) { state.dir = -state.dir; } else { state.sort = col; state.dir = 1; }
    apply();
  });
  if (sortSel) {
    sortSel.addEventListener("change", function () {
      var v = sortSel.value.split(":");
      state.sort = v[0]; state.dir = v.length > 1 ? parseInt(v[1], 10) : 1;
      apply();
    });
  }
  if (metricSel) { metricSel.addEventListener("change", function () { state.metric = metricSel.value; apply(); }); }
  search.addEventListener("input", function () {
    state.q = search.value.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
    apply();
  });
  reveal = function () {
    state.filter = "all"; state.metric = ""; state.q = [];
    search.value = "";
    if (metricSel) { metricSel.value = ""; }
    apply();
  };
  apply();
  openTarget(location.hash);
})();
"""

_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")

CSP = (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_HASH}'; img-src data:; "
       "base-uri 'none'; form-action 'none'")


def script_tag() -> str:
    """The script, exactly the text the Content-Security-Policy's hash allows."""
    return f"<script>{SCRIPT}</script>"
