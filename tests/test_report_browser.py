"""The report's filter, sort and search, clicked in a real headless Chromium.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands on the browser's
file descriptor 3, answers on 4), so the test needs no driver package. Clicks are real mouse events at an element's
position, the search is typed as text input, and what is checked is what the page then shows (rows not hidden,
in which order). Networking is off. Skipped when no Chromium is installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import time

import pytest
from test_report import _chromium  # the one way the report tests find a browser
from test_report_views import store  # noqa: F401 - the fixture: the same real runs as the HTML tests

from contextjudge.report import write_report

pytestmark = pytest.mark.slow


class Browser:
    """One headless Chromium page, driven over the DevTools pipe."""

    def __init__(self, binary: str, profile: str) -> None:
        cmd_r, self._cmd_w = os.pipe()  # we write commands, the browser reads them on fd 3
        self._out_r, out_w = os.pipe()  # the browser writes answers on fd 4

        def fds() -> None:  # in the child: the two ends at 3 and 4, whatever numbers they had
            hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 100)
            hi_w = fcntl.fcntl(out_w, fcntl.F_DUPFD, 100)
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--no-first-run", "--no-default-browser-check",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", f"--user-data-dir={profile}", "--window-size=1280,900",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=fds, close_fds=False, env={**os.environ, "HOME": profile})
        os.close(cmd_r)
        os.close(out_w)
        self._next = 0
        self._buf = b""
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout: float = 30) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self._next:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise RuntimeError(f"no answer to {method} from Chromium: {self.proc.stderr.read1(4000)!r}"
                                   if self.proc.poll() is not None else f"no answer to {method} in {timeout} s")
            ready, _, _ = select.select([self._out_r], [], [], left)
            if ready:
                chunk = os.read(self._out_r, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the pipe during {method}")
                self._buf += chunk

    def open(self, url: str, ready: str = "document.body && document.body.getAttribute('data-cj-ready') === '1'"
             ) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})
        self.wait_for(ready)

    def js(self, expression: str):
        out = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.js(f"!!({expression})"):
            if time.monotonic() > deadline:
                raise AssertionError(f"never true in the page: {expression}")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real left click in the middle of the element (scrolled into view first)."""
        x, y = self.js(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); "
                       "el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect(); "
                       "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type(self, selector: str, text: str) -> None:
        self.click(selector)
        self.send("Input.insertText", {"text": text})

    def key(self, key: str, code: str, key_code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": code,
                                                 "windowsVirtualKeyCode": key_code})

    def shown(self) -> list[int]:
        """The cases the table shows, in its order; the cards must show the same, in the same order."""
        rows = self.js("[...document.querySelectorAll('#cj-cases tbody tr')].filter(r => r.offsetParent !== null)"
                       ".map(r => +r.dataset.i)")
        cards = self.js("[...document.querySelectorAll('#cj-case-list > details.case')]"
                        ".filter(c => c.offsetParent !== null).map(c => +c.dataset.i)")
        assert rows == cards
        return rows

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10)
        except RuntimeError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._out_r)
        self.proc.stderr.close()


@pytest.fixture
def browser(tmp_path):
    binary = _chromium()
    if binary is None:
        pytest.skip("no headless Chromium installed (Debian: apt-get install -y chromium); the report's filter, "
                    "sort and search are then checked only on the HTML (tests/test_report_views.py)")
    b = Browser(binary, str(tmp_path / "profile"))
    yield b
    b.close()


def test_filter_sort_and_search_by_clicking_in_chromium(store, tmp_path, browser):  # noqa: F811
    report = tmp_path / "report.html"
    write_report(report, store=store, run="cand", compare="base")
    browser.open(report.as_uri())
    assert browser.js("document.getElementById('cj-toolbar').hidden") is False
    assert browser.shown() == [0, 1, 2, 3, 4, 5]
    assert browser.js("document.getElementById('cj-count').textContent") == "showing 6 of 6 case(s)"
    data = browser.js("[...document.querySelectorAll('#cj-cases tbody tr')].map(r => ({...r.dataset}))")
    failing = [int(d["i"]) for d in data if d["failing"] == "1"]
    assert 4 in failing and 5 in failing

    browser.click("button[data-filter='errors']")
    assert browser.shown() == [4, 5]
    assert browser.js("document.querySelector(\"button[data-filter='errors']\").getAttribute('aria-pressed')") \
        == "true"
    browser.click("button[data-filter='failing']")
    assert browser.shown() == failing
    browser.click("button[data-filter='changed']")
    assert browser.shown() == [int(d["i"]) for d in data if d["changed"] == "1"]
    browser.click("button[data-filter='all']")
    assert browser.shown() == [0, 1, 2, 3, 4, 5]

    # sort by relevancy (column 2): worst first, then errors (case 4), with ties in run order; click again: best first
    relevancy = {int(d["i"]): d["m2"] for d in data}
    scored = sorted((i for i, v in relevancy.items() if v not in ("err", "na")), key=lambda i: (float(relevancy[i]), i))
    errored = [i for i, v in relevancy.items() if v == "err"]
    browser.click("button[data-sort='m2']")
    assert browser.shown() == scored + errored
    assert browser.js("document.querySelector(\"th[data-col='m2']\").getAttribute('aria-sort')") == "ascending"
    browser.click("button[data-sort='m2']")
    best = sorted(scored, key=lambda i: (-float(relevancy[i]), i))
    assert browser.shown() == best + errored  # errors stay last in both directions
    assert browser.js("document.getElementById('cj-sort').value") == "m2:-1"

    # filter "failing" on one metric, chosen with the keyboard in the select: precision (the first metric)
    browser.click("button[data-filter='failing']")
    browser.click("#cj-filter-metric")
    browser.key("Escape", "Escape", 27)  # close the popup the click opened; focus stays on the select
    browser.key("ArrowDown", "ArrowDown", 40)
    assert browser.js("document.getElementById('cj-filter-metric').value") == "0"
    precision_failing = [int(d["i"]) for d in data if "0" in d["fail"].split()]
    assert sorted(browser.shown()) == sorted(precision_failing) and browser.shown()
    browser.click("button[data-filter='all']")

    # search: every word must appear in the case's input, output, expected output, node texts, name or tool fields
    browser.click("button[data-sort='']")
    browser.type("#cj-search", "garage opening")
    assert browser.shown() == [1]  # only the agent case's tool query says "opening"
    browser.js("document.getElementById('cj-search').select()")
    browser.send("Input.insertText", {"text": "LAPTOP"})
    assert browser.shown() == [1, 3, 5]  # node text (cases 1 and 5) and the input of case 3
    browser.js("document.getElementById('cj-search').select()")
    browser.send("Input.insertText", {"text": "nothing like this"})
    assert browser.shown() == []
    assert browser.js("document.getElementById('cj-count').textContent") == "showing 0 of 6 case(s)"


def test_without_scripts_every_case_is_listed_and_the_controls_stay_hidden(store, tmp_path, browser):  # noqa: F811
    report = tmp_path / "report.html"
    write_report(report, store=store, run="cand", compare="base")
    browser.open("about:blank", ready="true")  # attaches; the report itself is then loaded with scripts off
    browser.send("Emulation.setScriptExecutionDisabled", {"value": True})
    browser.send("Page.navigate", {"url": report.as_uri()})
    browser.wait_for("document.readyState === 'complete' && document.getElementById('cj-case-list')")
    assert browser.js("document.body.getAttribute('data-cj-ready')") is None  # the script did not run
    assert browser.js("document.getElementById('cj-toolbar').offsetParent") is None
    assert browser.shown() == [0, 1, 2, 3, 4, 5]


def test_a_link_to_a_case_opens_it_on_click_load_and_hashchange(store, tmp_path, browser):  # noqa: F811
    """Issue 48 item 9: the case table's link (#4) scrolled to a case that stayed collapsed."""
    report = tmp_path / "report.html"
    write_report(report, store=store, run="cand", compare="base")
    browser.open(report.as_uri())
    is_open = "document.getElementById('case-{}').open"
    assert [browser.js(is_open.format(i)) for i in (3, 4, 5)] == [False] * 3  # only the first failing ones open
    browser.click("#cj-cases tbody tr[data-i='3'] a[href='#case-3']")
    browser.wait_for(is_open.format(3))
    assert browser.js("(() => { const r = document.getElementById('case-3').getBoundingClientRect(); "
                      "return r.top >= -1 && r.top < innerHeight; })()")
    # collapsed again by hand, the same link (the hash already in the address bar) opens it again
    browser.js("document.getElementById('case-3').open = false")
    browser.click("#cj-cases tbody tr[data-i='3'] a[href='#case-3']")
    browser.wait_for(is_open.format(3))
    # a hash changed by the address bar or history
    browser.js("location.hash = '#case-4'")
    browser.wait_for(is_open.format(4))
    # a case hidden by the search: the link shows it again (filter back to all) and opens it
    browser.type("#cj-search", "nothing like this")
    assert browser.shown() == []
    browser.js("location.hash = '#case-5'")
    browser.wait_for(is_open.format(5))
    assert browser.shown() == [0, 1, 2, 3, 4, 5]
    # a page opened on a link
    browser.open(report.as_uri() + "#case-4")
    browser.wait_for(is_open.format(4))
    assert browser.js(is_open.format(3)) is False and browser.js(is_open.format(5)) is False
