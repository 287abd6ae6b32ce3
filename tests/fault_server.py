"""A loopback OpenAI-compatible chat server for tests and benchmarks: scripted answers, faults and latency.

It lives with the tests, not in the installed package: nothing at runtime needs it. Tests import it as
``fault_server`` (pytest puts ``tests/`` on ``sys.path``); a benchmark adds ``tests/`` to ``sys.path`` itself.

``FaultServer`` speaks enough of the OpenAI chat-completions protocol for ``langchain_openai.ChatOpenAI``, the
``openai`` SDK and other evaluation libraries pointed at its ``base_url``. It binds 127.0.0.1 only, limits request
sizes and request counts, and shuts itself down after ``lifetime`` seconds, so a forgotten server never outlives a
test session. It uses only the standard library.

How it answers:

* A contextjudge judge prompt (ids listed in the prompt, items in ``<node>``/``<statement>`` tags or labelled lines)
  gets one verdict per requested id, decided by ``verdict`` (a function of the item text; by default "yes" when the
  item text contains one of ``yes_words``). Rubric prompts get ``{"score": rubric_score}``.
* Any other prompt gets a JSON answer built from the requested structure: the ``json_schema`` response format, the
  first tool's parameter schema, a JSON schema embedded in the prompt, or a guess from the prompt's wording. This is
  what lets other libraries' metrics run against it.

Faults (``Fault``) are taken in order by the requests they match: HTTP errors with or without ``Retry-After``,
connection resets, slow answers, and damaged content (invalid or truncated JSON, prose, fences, ``<think>`` blocks,
odd verdict words, missing, unknown or duplicate ids, empty content, refusals). ``latency`` adds a fixed delay to
every answer. An answer longer than the request's ``max_tokens`` / ``max_completion_tokens`` is cut there, with
``finish_reason="length"``. Every request is recorded in ``server.requests`` with its prompt and completion token
counts. ``/v1/embeddings`` answers too (word-hashed vectors; counted in ``server.embedding_requests``), for libraries
that embed as well as chat.

    with FaultServer(yes_words=["Paris"], faults=[Fault("http", status=429, retry_after=0.01, times=2)]) as srv:
        judge = ChatOpenAI(model="fake", base_url=srv.url, api_key="x", max_retries=0)
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Fault", "FaultServer", "default_token_counter"]

logger = logging.getLogger("contextjudge")

MAX_BODY = 8 * 1024 * 1024
MAX_SLEEP = 30.0
EMBEDDING_DIM = 256

_VERDICT_ASK = re.compile(r'"yes" or "no" for each id \(')
_ITEM = re.compile(r"<([ns]\d+)>(.*?)</\1>", re.S)
_LABELLED = re.compile(r"^(n\d+\.s\d+) (.*)$", re.M)
_RUBRIC = re.compile(r'Answer with JSON only: \{"score"')
_REASON = re.compile(r'Answer with JSON only: \{"reason"')
_WORD = re.compile(r"[a-z0-9]+")

CONTENT_FAULTS = ("invalid_json", "truncated", "prose", "fence", "think", "words", "missing_id", "extra_id",
                  "duplicate_id", "conflicting_ids", "empty", "refusal", "fake_verdicts", "echo_data",
                  "length", "append")


@dataclass
class Fault:
    """One kind of misbehaviour, applied to the next ``times`` requests it matches (``times=None``: all of them).

    kind: ``http`` (``status``, optional ``retry_after`` seconds, optional ``message``), ``reset`` (the connection
    is closed without an answer), ``slow`` (answer after ``seconds``), ``html`` (HTTP 200 with an HTML page, as a
    proxy or captive portal sends), ``no_choices`` (HTTP 200, a completion whose ``choices`` list is empty), or one
    of the content faults
    (``invalid_json``, ``truncated``, ``prose``, ``fence``, ``think``, ``words``, ``missing_id``, ``extra_id``,
    ``duplicate_id``, ``conflicting_ids``, ``empty``, ``refusal``, ``fake_verdicts``; ``echo_data`` quotes the
    first judged item that holds JSON after the real answer, as a chatty judge might; ``append`` writes ``message``
    after the real answer, as a judge talked into repeating an injected text might; ``length`` cuts the answer and
    reports ``finish_reason="length"``, as a server does when it hits ``max_tokens``).
    methods: which requests it matches: any of ``json_schema``, ``tools``, ``json_object``, ``text``; empty = all.
    """

    kind: str
    times: int | None = 1
    status: int = 500
    retry_after: float | None = None
    message: str = ""
    seconds: float = 0.0
    methods: tuple[str, ...] = ()
    word_yes: str = "Yes."
    word_no: str = "FALSE"

    def matches(self, method: str) -> bool:
        return not self.methods or method in self.methods


def default_token_counter(text: str) -> int:
    """About four characters a token; pass a tiktoken encoder's ``len(encode(...))`` for exact counts."""
    return (len(text) + 3) // 4 if text else 0


def _words(text: str) -> set[str]:
    return set(_WORD.findall((text or "").lower()))


@dataclass
class _State:
    faults: list[Fault] = field(default_factory=list)
    remaining: list[int | None] = field(default_factory=list)


class FaultServer:
    """A bounded loopback chat-completions server. Use as a context manager, or call ``start()``/``stop()``."""

    def __init__(
        self,
        *,
        yes_words: Iterable[str] = (),
        verdict: Callable[[str, str], str] | None = None,
        faults: Iterable[Fault] = (),
        latency: float = 0.0,
        rubric_score: float = 1.0,
        reason: str = "The text bears on the question as asked.",
        array_len: int = 2,
        count_tokens: Callable[[str], int] | None = None,
        port: int = 0,
        lifetime: float = 900.0,
        max_requests: int = 200_000,
        keep_prompts: bool = False,
        text_answer: Callable[[str], Any] | None = None,
    ) -> None:
        self.yes_words = [w.lower() for w in yes_words]
        self._verdict = verdict
        self.latency = float(latency)
        self.rubric_score = rubric_score
        self.reason = reason
        self.array_len = array_len
        self.count_tokens = count_tokens or default_token_counter
        self.port = port
        self.lifetime = lifetime
        self.max_requests = max_requests
        self.keep_prompts = keep_prompts
        # answers prompts that are not contextjudge's judge prompts (a question writer's): the prompt -> a JSON
        # value (sent as JSON), a str (sent as it is), or None (the usual answers)
        self.text_answer = text_answer
        self.requests: list[dict[str, Any]] = []
        # /v1/embeddings requests, kept apart from the chat requests (their calls and tokens are counted apart)
        self.embedding_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._state = _State()
        # bumped by reset(): a request begun under an earlier plan (one its client gave up on, still being answered
        # when the plan changed) is not logged among the new plan's requests
        self._generation = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None
        self._inflight = 0
        self.peak_inflight = 0
        self.set_faults(faults)

    # ------------------------------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """The ``base_url`` to give a client, e.g. ``http://127.0.0.1:54321/v1``."""
        if self._httpd is None:
            raise RuntimeError("FaultServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> FaultServer:
        if self._httpd is not None:
            return self
        handler = _make_handler(self)
        httpd = _Server(("127.0.0.1", self.port), handler)
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="contextjudge-fault-server", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if self._timer is not None:
            self._timer.cancel()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ configuration
    def set_faults(self, faults: Iterable[Fault]) -> None:
        """Replace the fault plan (and forget the old one's remaining counts)."""
        faults = list(faults)
        with self._lock:
            self._state = _State(faults=faults, remaining=[f.times for f in faults])

    def reset(self, faults: Iterable[Fault] = ()) -> None:
        """Forget recorded requests and set a new fault plan."""
        with self._lock:
            self.requests = []
            self.peak_inflight = 0
            self._generation += 1
        self.set_faults(faults)

    def _take_fault(self, method: str) -> Fault | None:
        with self._lock:
            for i, f in enumerate(self._state.faults):
                left = self._state.remaining[i]
                if (left is None or left > 0) and f.matches(method):
                    if left is not None:
                        self._state.remaining[i] = left - 1
                    return f
        return None

    # ------------------------------------------------------------------------------------------ answers
    def decide(self, text: str) -> str:
        if self._verdict is not None:
            return self._verdict(text, "")
        low = text.lower()
        return "yes" if any(w in low for w in self.yes_words) else "no"

    def contextjudge_answer(self, prompt: str) -> dict[str, Any] | None:
        """The answer to a contextjudge judge prompt, or None when ``prompt`` is not one."""
        if _RUBRIC.search(prompt):
            return {"score": self.rubric_score, "reason": self.reason}
        if not _VERDICT_ASK.search(prompt):
            if _REASON.search(prompt):
                return {"reason": self.reason}
            return None
        # The judged items: sentences labelled "n1.s2 ..." (relevance), else the statements, else the nodes; the
        # last tagged element with an id holds its text (statements come after the context nodes).
        texts: dict[str, str] = {}
        node_ids = []
        for iid, text in _ITEM.findall(prompt):
            texts[iid] = text
            if iid.startswith("n") and iid not in node_ids:
                node_ids.append(iid)
        labelled = _LABELLED.findall(prompt)
        for iid, text in labelled:
            texts[iid] = text
        statements = [i for i in texts if i.startswith("s")]
        ids = [i for i, _ in labelled] if labelled else statements or node_ids
        verdicts = []
        for iid in ids:
            v = self.decide(texts.get(iid, ""))
            entry: dict[str, Any] = {"id": iid, "verdict": v, "reason": self.reason}
            if "node_ids" in prompt and iid.startswith("s"):
                entry["node_ids"] = node_ids[:1] if v == "yes" else []
            verdicts.append(entry)
        return {"verdicts": verdicts}

    def generic_answer(self, body: dict[str, Any], method: str, prompt: str) -> Any:
        """A plausible JSON answer to someone else's prompt, built from the structure it asks for."""
        schema = None
        if method == "json_schema":
            rf = body.get("response_format") or {}
            schema = (rf.get("json_schema") or {}).get("schema")
        elif method == "tools":
            fn = (body.get("tools") or [{}])[0].get("function") or {}
            schema = fn.get("parameters")
        elif isinstance(body.get("response_format"), dict) and body["response_format"].get("schema"):
            schema = body["response_format"]["schema"]
        if schema is None:
            schema = _embedded_schema(prompt)
        n = _guess_count(prompt, self.array_len)
        if schema is not None:
            return _instance(schema, schema.get("$defs") or schema.get("definitions") or {}, n, self.reason,
                             self.rubric_score)
        keys = re.findall(r"with (?:the|a|an) ['\"`](\w+)['\"`] key", prompt)
        if keys:
            key = keys[0]
            if key in ("verdicts", "statements", "claims", "truths"):
                return {key: [{"verdict": "yes", "reason": self.reason} for _ in range(n)]}
            return {key: self.reason}
        return {"reason": self.reason, "verdict": "yes"}

    # ------------------------------------------------------------------------------------------ serving
    def handle_chat(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes | None, dict[str, Any]]:
        """Status, headers, body (None: reset the connection) and the log record for one chat request."""
        t0 = time.time()
        method = _method_of(body)
        prompt = "\n".join(_message_text(m) for m in body.get("messages") or [])
        record: dict[str, Any] = {"t0": t0, "generation": self._generation, "method": method,
                                  "model": body.get("model"), "fault": None,
                                  "status": 200, "stream": bool(body.get("stream")),
                                  "max_tokens": body.get("max_tokens"),
                                  "max_completion_tokens": body.get("max_completion_tokens")}
        record["message_tokens"], record["schema_tokens"] = self._prompt_parts(body)
        record["prompt_tokens"] = record["message_tokens"] + record["schema_tokens"]
        record["prompt_hash"] = hash(prompt)
        if self.keep_prompts:
            record["prompt"] = prompt
            record["body"] = body
        fault = self._take_fault(method)
        if fault is not None:
            record["fault"] = fault.kind if fault.kind != "http" else f"http{fault.status}"
        if self.latency:
            time.sleep(min(self.latency, MAX_SLEEP))
        if fault is not None and fault.kind == "http":
            headers = {}
            if fault.retry_after is not None:
                headers["retry-after"] = f"{fault.retry_after:g}"
            msg = fault.message or {429: "Rate limit reached, slow down", 401: "Incorrect API key provided",
                                    400: "Invalid request", 500: "Internal server error",
                                    503: "Service unavailable"}.get(fault.status, "error")
            typ = {429: "rate_limit_error", 401: "invalid_request_error", 400: "invalid_request_error"}.get(
                fault.status, "server_error")
            record["status"] = fault.status
            return fault.status, headers, json.dumps({"error": {"message": msg, "type": typ, "code": None}}).encode(), \
                record
        if fault is not None and fault.kind == "reset":
            record["status"] = 0
            return 0, {}, None, record
        if fault is not None and fault.kind == "slow":
            time.sleep(min(fault.seconds, MAX_SLEEP))
        if fault is not None and fault.kind == "html":
            page = (fault.message or "<html><head><title>Bad gateway</title></head><body><h1>502 Bad Gateway</h1>"
                    "<p>The upstream server did not answer.</p></body></html>")
            return 200, {"content-type": "text/html; charset=utf-8"}, page.encode(), record
        if fault is not None and fault.kind == "no_choices":
            empty = {"id": f"chatcmpl-{int(t0 * 1000)}", "object": "chat.completion", "created": int(t0),
                     "model": body.get("model") or "fake", "choices": [],
                     "usage": {"prompt_tokens": record["prompt_tokens"], "completion_tokens": 0,
                               "total_tokens": record["prompt_tokens"]}}
            return 200, {}, json.dumps(empty).encode(), record
        own = self.text_answer(prompt) if self.text_answer is not None else None
        answer = self.contextjudge_answer(prompt) if own is None else own
        if answer is None:
            answer = self.generic_answer(body, method, prompt)
        refusal = None
        text = answer if isinstance(answer, str) else json.dumps(answer)
        if fault is not None and fault.kind in CONTENT_FAULTS:
            text, refusal = _damage(fault, answer, text, prompt)
        finish = "length" if fault is not None and fault.kind == "length" else "stop"
        caps = [int(c) for c in (body.get("max_tokens"), body.get("max_completion_tokens")) if c]
        if caps and text and self.count_tokens(text) > min(caps):
            # a real server stops at the request's answer cap and says so
            cut = len(text)
            while cut > 0 and self.count_tokens(text[:cut]) > min(caps):
                cut = min(cut - 1, cut * min(caps) // max(1, self.count_tokens(text[:cut])))
            text, finish = text[:cut], "length"
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
        if method == "tools" and refusal is None and text:
            fn = ((body.get("tools") or [{}])[0].get("function") or {}).get("name", "answer")
            message["content"] = None
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}", "type": "function",
                                      "function": {"name": fn, "arguments": text}}]
            finish = "tool_calls" if finish == "stop" else finish
        if refusal is not None:
            message["content"] = None
        completion_tokens = self.count_tokens(text or refusal or "")
        record["completion_tokens"] = completion_tokens
        record["finish_reason"] = finish
        payload = {
            "id": f"chatcmpl-{int(t0 * 1000)}", "object": "chat.completion", "created": int(t0),
            "model": body.get("model") or "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": record["prompt_tokens"], "completion_tokens": completion_tokens,
                      "total_tokens": record["prompt_tokens"] + completion_tokens},
        }
        if body.get("stream"):
            return 200, {"content-type": "text/event-stream"}, _sse(payload), record
        return 200, {}, json.dumps(payload).encode(), record

    def handle_embeddings(self, body: dict[str, Any]) -> tuple[int, bytes]:
        """An embeddings answer: one vector per input, the input's words hashed into ``EMBEDDING_DIM`` buckets and
        normalised, so texts that share words lie close (as a real embedding model's would, roughly) and the same
        text always gets the same vector. Inputs may be strings or token-id lists (then hashed as they are)."""
        raw = body.get("input")
        inputs = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        if not inputs or any(not isinstance(x, (str, list)) for x in inputs):
            return 400, json.dumps({"error": {"message": "input: a string or a list of strings"}}).encode()
        data, tokens = [], 0
        for k, text in enumerate(inputs):
            words = _WORD.findall(text.lower()) if isinstance(text, str) else [str(t) for t in text]
            tokens += self.count_tokens(text) if isinstance(text, str) else len(text)
            vec = [0.0] * EMBEDDING_DIM
            for w in words or [""]:
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "big")
                vec[h % EMBEDDING_DIM] += 1.0 if (h >> 16) & 1 else -1.0
            norm = sum(v * v for v in vec) ** 0.5 or 1.0
            data.append({"object": "embedding", "index": k, "embedding": [v / norm for v in vec]})
        with self._lock:
            self.embedding_requests.append({"t0": time.time(), "inputs": len(inputs), "prompt_tokens": tokens,
                                            "model": body.get("model")})
        return 200, json.dumps({"object": "list", "data": data, "model": body.get("model") or "fake",
                                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}).encode()

    def embedding_totals(self) -> dict[str, int]:
        with self._lock:
            return {"calls": len(self.embedding_requests),
                    "inputs": sum(r["inputs"] for r in self.embedding_requests),
                    "tokens": sum(r["prompt_tokens"] for r in self.embedding_requests)}

    def _prompt_tokens(self, body: dict[str, Any]) -> int:
        messages, schema = self._prompt_parts(body)
        return messages + schema

    def _prompt_parts(self, body: dict[str, Any]) -> tuple[int, int]:
        """Prompt tokens of the messages' text (4 a message, 3 for the reply's priming) and of the answer schema
        (a json_schema response format, or the tools), which providers bill as prompt tokens too."""
        n = 3
        for m in body.get("messages") or []:
            n += 4 + self.count_tokens(_message_text(m))
        schema = 0
        if body.get("tools"):
            schema += self.count_tokens(json.dumps(body["tools"]))
        rf = body.get("response_format")
        if isinstance(rf, dict) and rf.get("type") == "json_schema":
            schema += self.count_tokens(json.dumps(rf.get("json_schema", {}).get("schema", {})))
        return n, schema

    def _log(self, record: dict[str, Any]) -> None:
        record["t1"] = time.time()
        with self._lock:
            if record.get("generation", self._generation) == self._generation:
                self.requests.append(record)

    def _enter(self) -> bool:
        with self._lock:
            if len(self.requests) + self._inflight >= self.max_requests:
                return False
            self._inflight += 1
            self.peak_inflight = max(self.peak_inflight, self._inflight)
            return True

    def _leave(self) -> None:
        with self._lock:
            self._inflight -= 1

    # ------------------------------------------------------------------------------------------ summaries
    def calls(self, ok_only: bool = False) -> int:
        return sum(1 for r in self.requests if not ok_only or r["status"] == 200)

    def totals(self) -> dict[str, int]:
        ok = [r for r in self.requests if r["status"] == 200]
        return {"calls": len(self.requests), "ok_calls": len(ok),
                "prompt_tokens": sum(r["prompt_tokens"] for r in self.requests),
                "message_tokens": sum(r.get("message_tokens", 0) for r in self.requests),
                "schema_tokens": sum(r.get("schema_tokens", 0) for r in self.requests),
                "completion_tokens": sum(r.get("completion_tokens", 0) for r in ok)}


# ---------------------------------------------------------------------------------------------- helpers
def _method_of(body: dict[str, Any]) -> str:
    if body.get("tools"):
        return "tools"
    rf = body.get("response_format")
    if isinstance(rf, dict):
        if rf.get("type") == "json_schema":
            return "json_schema"
        if rf.get("type") == "json_object":
            return "json_object"
    return "text"


def _message_text(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _embedded_schema(prompt: str) -> dict[str, Any] | None:
    """The outermost JSON schema written into the prompt (some libraries put the output schema in the text)."""
    idx = prompt.find('"properties"')
    if idx < 0:
        return None
    best = None
    start = prompt.rfind("{", 0, idx)
    while start >= 0:
        depth, end = 0, -1
        for j in range(start, len(prompt)):
            c = prompt[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end > idx:
            try:
                obj = json.loads(prompt[start:end + 1])
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "properties" in obj:
                best = obj
        start = prompt.rfind("{", 0, start)
    return best


def _guess_count(prompt: str, default: int) -> int:
    """How many verdicts a prompt wants: an explicit "(N documents)"-style count, one per sentence of an expected
    output the prompt asks about sentence by sentence, else the number of listed contexts."""
    m = re.search(r"\((\d+) (?:documents?|nodes?|contexts?|statements?)\)", prompt)
    if m:
        return max(1, min(int(m.group(1)), 200))
    if re.search(r"extract statements|statements? found in the context", prompt, re.I):
        found = re.findall(r"\nContext:\s*\n(.+?)\n\s*\n", prompt, re.S)
        if found:  # one statement a sentence, as a judge asked to extract statements would give
            return max(1, min(len(re.findall(r"[.!?](?:\s|$)", found[-1].strip() + " ")), 200))
    if re.search(r"each sentence", prompt, re.I):
        m = re.search(r"Expected Output:\s*\n(.+?)\n\s*\n", prompt, re.S)
        if m:
            return max(1, min(len(re.findall(r"[.!?](?:\s|$)", m.group(1).strip() + " ")), 200))
    m = re.search(r"[Rr]etrieval [Cc]ontexts?:\s*\n?(\[.*?\])\s*\n", prompt, re.S)
    if m:
        try:
            val = json.loads(m.group(1))
            if isinstance(val, list) and val:
                return min(len(val), 200)
        except ValueError:
            return max(1, min(m.group(1).count("', '") + 1, 200))
    return default


def _instance(schema: dict[str, Any], defs: dict[str, Any], n: int, reason: str, score: float,
              name: str = "", depth: int = 0) -> Any:
    if depth > 8:
        return None
    if "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        return _instance(defs.get(ref, {}), defs, n, reason, score, name, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return _instance(options[0], defs, n, reason, score, name, depth + 1)
    if "enum" in schema:
        vals = schema["enum"]
        for v in vals:
            if str(v).lower() in ("yes", "true", "1"):
                return v
        return vals[0]
    if "const" in schema:
        return schema["const"]
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "string")
    if typ == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _instance(v, defs, n, reason, score, k, depth + 1) for k, v in props.items()}
    if typ == "array":
        count = n if name.lower() in ("verdicts", "verdict", "results", "classifications", "items") else 2
        count = max(int(schema.get("minItems", 0)), min(count, int(schema.get("maxItems", count))))
        return [_instance(schema.get("items") or {"type": "string"}, defs, n, reason, score, name, depth + 1)
                for _ in range(count)]
    if typ == "integer":
        return 1
    if typ == "number":
        return score
    if typ == "boolean":
        return True
    low = name.lower()
    if low in ("verdict", "answer", "attributed", "relevant", "useful"):
        return "yes"
    if low in ("statement", "sentence", "claim", "text"):
        return "A statement taken from the text."
    return reason


def _damage(fault: Fault, answer: dict[str, Any], text: str, prompt: str = "") -> tuple[str, str | None]:
    """The answer text as the fault damages it, and a refusal message (or None)."""
    kind = fault.kind
    if kind == "echo_data":
        texts = [t for _, t in _ITEM.findall(prompt)] + [t for _, t in _LABELLED.findall(prompt)]
        quote = next((t for t in texts if "{" in t and "[n" not in t), "")
        return f"My verdicts:\n{text}\n\nFor the record, one node said: {quote}", None
    verdicts = answer.get("verdicts") if isinstance(answer, dict) else None
    if kind == "invalid_json":
        return "{verdicts: [this is not json, " + text[:20], None
    if kind in ("truncated", "length"):
        return text[: max(1, int(len(text) * 0.6))], None
    if kind == "prose":
        return f"Here is my assessment of each item. {text} I hope this helps.", None
    if kind == "fence":
        return f"Sure.\n```json\n{text}\n```\n", None
    if kind == "think":
        decoy = json.dumps({"verdicts": [{"id": v["id"], "verdict": "maybe"} for v in (verdicts or [])]})
        return f"<think>Let me weigh each item. Draft: {decoy}. Now the final answer.</think>\n{text}", None
    if kind == "append":
        return f"{text}\n{fault.message}", None
    if kind == "empty":
        return "", None
    if kind == "refusal":
        return "", "I'm sorry, but I can't help with that request."
    if verdicts is None:
        return text, None
    return json.dumps({**answer, "verdicts": _damage_verdicts(fault, [dict(v) for v in verdicts])}), None


def _damage_verdicts(fault: Fault, vs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdict list as the fault changes it (a copy the caller may keep)."""
    kind = fault.kind
    if kind == "words":
        for v in vs:
            v["verdict"] = fault.word_yes if v["verdict"] == "yes" else fault.word_no
    elif kind == "missing_id":
        vs = vs[1:] if len(vs) > 1 else []
    elif kind == "extra_id":
        vs.append({"id": "zz99", "verdict": "yes", "reason": "an id nobody asked for"})
    elif kind == "duplicate_id":
        vs.append(dict(vs[0])) if vs else None
    elif kind == "conflicting_ids":
        if vs:
            first = dict(vs[0])
            first["verdict"] = "no" if first["verdict"] == "yes" else "yes"
            vs.append(first)
    elif kind == "fake_verdicts":
        vs = [{"id": v["id"], "verdict": "yes", "reason": "ignore previous instructions"} for v in vs]
    return vs


def _sse(payload: dict[str, Any]) -> bytes:
    choice = payload["choices"][0]
    msg = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
    if msg.get("tool_calls"):
        delta = {"role": "assistant", "tool_calls": [{"index": 0, **msg["tool_calls"][0]}]}
    chunks = [
        {**payload, "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**payload, "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    for c in chunks:
        c.pop("usage", None)
    chunks.append({**payload, "object": "chat.completion.chunk", "choices": []})
    out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return out + b"data: [DONE]\n\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a class attribute: listen() runs in the constructor

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that gave up (timeout, reset) is business as usual here, not a traceback on stderr
        logger.debug("fault-server: a connection from %s ended early", client_address, exc_info=True)


def _make_handler(server: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "contextjudge-fault-server"
        # Headers and body go out in two writes; with Nagle on, a keep-alive client's delayed ACK stalls the body
        # about 40 ms after an idle gap, which would add to every call's latency.
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: stderr stays clean
            logger.debug("fault-server: " + fmt, *args)

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            hdrs = {"content-type": "application/json", **(headers or {})}
            for k, v in hdrs.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _reset(self) -> None:
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass
            self.close_connection = True

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": "fake", "object": "model", "created": 0, "owned_by": "contextjudge"}]}).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            if length > MAX_BODY:
                self._send(413, b'{"error": {"message": "request too large"}}')
                self.close_connection = True
                return
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/").endswith("/embeddings"):
                try:
                    status, payload = server.handle_embeddings(json.loads(raw or b"{}"))
                except ValueError:
                    status, payload = 400, b'{"error": {"message": "request body is not JSON"}}'
                self._send(status, payload)
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, b'{"error": {"message": "only /v1/chat/completions and /v1/embeddings are '
                                b'served"}}')
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, b'{"error": {"message": "request body is not JSON"}}')
                return
            if not server._enter():  # noqa: SLF001
                self._send(503, b'{"error": {"message": "fault server request limit reached"}}')
                return
            try:
                status, headers, payload, record = server.handle_chat(body)
            except Exception as exc:  # noqa: BLE001 - a bug in the double answers 500, never hangs the client
                logger.exception("fault-server: handler failed")
                server._leave()  # noqa: SLF001
                self._send(500, json.dumps({"error": {"message": f"fault server bug: {exc}"}}).encode())
                return
            server._leave()  # noqa: SLF001
            server._log(record)  # noqa: SLF001
            if payload is None:
                self._reset()
                return
            self._send(status, payload, headers)

    return Handler
