"""Calibration files: decision thresholds fitted on a user's own labels, and the judge that applies them.

``contextjudge calibrate`` writes a file like::

    {"contextjudge_calibration": 1, "judge": "local", "judge_name": "contextjudge-local", "judge_identity": "...",
     "thresholds": {"node_usefulness": 0.42, "sentence_relevance": 0.61},
     "fitted": {"node_usefulness": {"items": 240, "kappa_before": 0.51, "kappa_after": 0.58, ...}},
     "created": "2026-01-01T00:00:00+00:00"}

and ``model="@contextjudge-calibration.json"`` (curl's ``@file``; a ``provider:model`` string never starts with
"@"), ``--model @file`` or a ``pathlib.Path`` loads it as a ``CalibratedJudge``: the judge named in ``judge``, whose
verdict on an item is yes iff the item's confidence is at least its family's threshold. Items without a confidence,
and families without a threshold, keep the judge's own verdict. The thresholds are part of the judge's identity, so
verdicts cached for the bare judge are never reused for the calibrated one, nor for another file's thresholds.

A ``CalibratedJudge`` is a wrapper judge (``protocol.WrapperJudge``): it asks the judge it wraps through that judge's
own client, giving it the thresholds as an ``Adjustment``, which the client applies to each parsed answer before it
is cached (or merged with judge repeats). ``models.load_calibrated_judge`` reads a file into one.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict

from .._json import loads as read_json
from ..errors import ConfigurationError
from ._families import CALIBRATION_KEYS, family
from ._naming import judge_identity, judge_name
from ._protocol import Build, InnerClients, JudgeRequest, request_from_message_kwargs

if TYPE_CHECKING:  # pragma: no cover
    from .._result import Usage
    from ._schemas import Answer

__all__ = ["DEFAULT_FILE", "FAMILIES", "FORMAT_KEY", "CalibratedJudge", "Calibration",
           "combined_identity", "family_of"]

logger = logging.getLogger("contextjudge")

FORMAT_KEY = "contextjudge_calibration"
FORMAT_VERSION = 1
DEFAULT_FILE = "contextjudge-calibration.json"
# the verdict families as a calibration file names them (``VerdictFamily.calibration_key``): node usefulness judged
# against the app's own answer (context utilization) has its own key, since "useful for the actual output" is a
# different question, and so has the support of the app's answer's statements (faithfulness)
FAMILIES = CALIBRATION_KEYS


def family_of(task: str, reference_kind: str | None = None) -> str:
    """The calibration key of a request's verdict family from its task (or a family's name) and reference kind:
    ``.actual_output`` appended for usefulness against the app's answer and for faithfulness
    (``VerdictFamily.calibration_key``; ``request.verdict_family.calibration_key(request.reference_kind)`` for a
    request)."""
    return family(task).calibration_key(reference_kind)


@dataclass
class Calibration:
    """The contents of a calibration file (see the module docstring)."""

    judge: str
    thresholds: dict[str, float] = field(default_factory=dict)
    judge_name: str | None = None
    judge_identity: str | None = None
    fitted: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    path: str | None = None
    # the embedded judge's weights fitted on the labels (issue 47): family -> weights' key -> weights
    learned: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # the embedded judge's label memory per node family (issue 47): {"kappa", "beta", "entries": [[question, node,
    # label], ...]}: a new pair close to labelled ones leans on their labels (``_local._learned.apply_memory``)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = self.path or "calibration"
        if not isinstance(self.judge, str) or not self.judge.strip() or self.judge.strip().startswith("@"):
            raise ConfigurationError(f"{where}: 'judge' must name the judge it calibrates (a model spec such as "
                                     f"'local'), got {self.judge!r}.")
        clean: dict[str, float] = {}
        for fam, t in (self.thresholds or {}).items():
            if fam not in FAMILIES:
                raise ConfigurationError(f"{where}: unknown verdict family {fam!r} in 'thresholds'; the families are "
                                         f"{', '.join(FAMILIES)}.")
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= float(t) <= 1.0:
                raise ConfigurationError(f"{where}: the threshold of {fam!r} must be a number between 0 and 1, got "
                                         f"{t!r}.")
            clean[fam] = float(t)
        self.thresholds = clean
        learned: dict[str, dict[str, list[float]]] = {}
        for fam, keys in (self.learned or {}).items():
            if fam not in FAMILIES or not isinstance(keys, dict) or not all(
                    isinstance(w, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in w)
                    for w in keys.values()):
                raise ConfigurationError(f"{where}: 'learned' must map a verdict family ({', '.join(FAMILIES)}) to "
                                         f"weights' keys and lists of numbers; {fam!r} does not. Run `contextjudge "
                                         "calibrate` again to rewrite it.")
            learned[fam] = {str(k): [float(x) for x in w] for k, w in keys.items()}
        self.learned = learned
        mem: dict[str, dict[str, Any]] = {}
        for fam, m in (self.memory or {}).items():
            ok = (fam in ("sentence_relevance", "node_usefulness") and isinstance(m, dict)
                  and all(isinstance(m.get(k), (int, float)) and not isinstance(m.get(k), bool) for k in ("kappa", "beta"))
                  and isinstance(m.get("entries"), list)
                  and all(isinstance(e, list) and len(e) == 3 and isinstance(e[0], str) and isinstance(e[1], str)
                          and isinstance(e[2], (bool, int)) for e in m["entries"]))
            if not ok:
                raise ConfigurationError(f"{where}: 'memory' must map a node family (sentence_relevance, "
                                         f"node_usefulness) to kappa, beta and entries [question, node, label]; {fam!r} "
                                         "does not. Run `contextjudge calibrate` again to rewrite it.")
            mem[fam] = {"kappa": float(m["kappa"]), "beta": float(m["beta"]),
                        "entries": [[e[0], e[1], bool(e[2])] for e in m["entries"]]}
        self.memory = mem
        self.created = self.created or _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()

    # ------------------------------------------------------------------------------------------- file
    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object."""
        return {FORMAT_KEY: FORMAT_VERSION, "judge": self.judge, "judge_name": self.judge_name,
                "judge_identity": self.judge_identity, "thresholds": dict(sorted(self.thresholds.items())),
                "fitted": self.fitted, "created": self.created,
                **({"learned": self.learned} if self.learned else {}),
                **({"memory": self.memory} if self.memory else {})}

    @classmethod
    def from_dict(cls, data: Any, where: str = "calibration") -> Calibration:
        """Read a file's JSON object (``where`` names it in errors); raises ``ConfigurationError`` when it is not one
        this version reads."""
        if not isinstance(data, dict) or data.get(FORMAT_KEY) is None:
            raise ConfigurationError(f"{where} is not a contextjudge calibration file (no {FORMAT_KEY!r} key). Write "
                                     "one with `contextjudge calibrate --labels FILE --model MODEL`.")
        if data.get(FORMAT_KEY) != FORMAT_VERSION:
            raise ConfigurationError(f"{where}: calibration format {data.get(FORMAT_KEY)!r} is not one this version "
                                     f"reads ({FORMAT_VERSION}); run `contextjudge calibrate` again to rewrite it.")
        thresholds = data.get("thresholds") or {}
        if not isinstance(thresholds, dict):
            raise ConfigurationError(f"{where}: 'thresholds' must be an object of family -> threshold.")
        return cls(judge=str(data.get("judge") or ""), thresholds=thresholds, judge_name=data.get("judge_name"),
                   judge_identity=data.get("judge_identity"), fitted=data.get("fitted") or {},
                   created=data.get("created") or "", path=where, learned=data.get("learned") or {},
                   memory=data.get("memory") or {})

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Calibration:
        """Read the calibration file at ``path``."""
        p = Path(path)
        try:
            text = p.read_text("utf-8")
        except FileNotFoundError:
            raise ConfigurationError(f"calibration file {str(p)!r} does not exist. Write it with `contextjudge "
                                     "calibrate --labels FILE --model MODEL`, or check the path after '@'.") from None
        except OSError as exc:
            raise ConfigurationError(f"cannot read calibration file {str(p)!r}: {exc.strerror or exc}.") from exc
        try:
            data = read_json(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"calibration file {str(p)!r} is not valid JSON ({exc}).") from exc
        return cls.from_dict(data, str(p))

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the file at ``path`` atomically."""
        p = Path(path)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", "utf-8")
        os.replace(tmp, p)  # never leaves half a file where a judge would load it

    def summary(self) -> dict[str, str]:
        """Per calibrated family, in words: "calibrated on N of your labels; kappa X [lo, hi] cross-validated"."""
        out = {}
        changed = {*self.thresholds, *self.learned, *self.memory}
        for fam in dict.fromkeys([*self.thresholds, *self.learned, *self.memory, *self.fitted]):
            fit = self.fitted.get(fam) or {}
            k = fit.get("kappa_cv", fit.get("kappa_after_cv"))
            ci = fit.get("kappa_cv_ci")
            kappa = "n/a" if not isinstance(k, (int, float)) else f"{k:.2f}" + (
                f" [{ci[0]:.2f}, {ci[1]:.2f}]" if isinstance(ci, list) and len(ci) == 2 and None not in ci else "")
            if fam in changed:
                out[fam] = f"calibrated on {int(fit.get('items') or 0)} of your labels; kappa {kappa} cross-validated"
            else:  # measured only (a store's labels where no fit beat the shipped weights): the judge as shipped
                out[fam] = (f"measured on {int(fit.get('items') or 0)} of your labels, its own weights kept; kappa "
                            f"{kappa} cross-validated")
        return out

    # ------------------------------------------------------------------------------------------- judging
    def fingerprint(self) -> str:
        """What of the file changes verdicts: the thresholds, and the fitted weights' hash (part of the judge
        identity)."""
        base = json.dumps(dict(sorted(self.thresholds.items())), sort_keys=True)
        return f"{base}|learned:{self.learned_hash()}" if self.learned or self.memory else base

    def learned_hash(self) -> str:
        """A short hash of the fitted weights and the label memory (empty without them)."""
        return learned_hash(self.learned, self.memory) if self.learned or self.memory else ""

    def adjust(self, request: JudgeRequest, verdicts: dict[str, dict[str, Any]]) -> None:
        """Apply the family's threshold to ``verdicts`` (parsed, keyed by item id) in place."""
        t = self.thresholds.get(request.verdict_family.calibration_key(request.reference_kind))
        if t is None:
            return
        for v in verdicts.values():
            conf = v.get("confidence")
            if not isinstance(conf, (int, float)):
                continue
            new = "yes" if conf >= t else "no"
            if new != v.get("verdict"):
                v["reason"] = (f"{v.get('reason') or ''} (calibrated: confidence {conf:.2f} is "
                               f"{'at or above' if new == 'yes' else 'below'} the threshold {t:.2f})").strip()
                v["verdict"] = new
                if new == "no":
                    v["node_ids"] = []
            v["threshold"] = t


class _Thresholds:
    """A calibration as the adjustment of the wrapped judge's answers (``protocol.Adjustment``). Equal for equal
    thresholds, so a judge client keeps one client of the wrapped judge per calibration."""

    __slots__ = ("calibration", "fingerprint")

    def __init__(self, calibration: Calibration) -> None:
        self.calibration = calibration
        self.fingerprint = calibration.fingerprint()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Thresholds) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def name(self, judge_name: str) -> str:
        """``<judge>+calibrated``, as the calibrated judge is named."""
        return f"{judge_name}+calibrated"

    def identity(self, judge_identity: str) -> str:
        """The wrapped judge's identity (as called: answer cap included) with the thresholds."""
        return combined_identity(judge_identity, self.fingerprint)

    def __call__(self, request: JudgeRequest, verdicts: dict[str, dict[str, Any]]) -> None:
        self.calibration.adjust(request, verdicts)


class CalibratedJudge(BaseChatModel):
    """A judge with decision thresholds fitted on labels (a calibration file): usable wherever ``model=`` is."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    judge: BaseChatModel
    calibration: Calibration

    @property
    def _llm_type(self) -> str:
        return "contextjudge-calibrated"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"judge": f"{judge_name(self.judge)}+calibrated", "wraps": judge_identity(self.judge),
                "thresholds": self.calibration.fingerprint()}

    # ------------------------------------------------------------------------------------------- wrapper judge
    def _thresholds(self) -> _Thresholds:
        return _Thresholds(self.calibration)

    def contextjudge_identity(self, clients: InnerClients, identity: str) -> str:
        """The identity of the wrapped judge's client with the thresholds (``combined_identity``)."""
        return clients.client_for(self.judge, self._thresholds()).identity

    def contextjudge_billed(self) -> tuple[Any, ...]:
        """None of its own: its calls go out under its own name (``<judge>+calibrated``)."""
        return ()

    async def contextjudge_ask(self, request: JudgeRequest, build: Build, clients: InnerClients) -> Answer:
        """The wrapped judge's answer, its verdicts decided by the thresholds (applied by its client before caching)."""
        return await clients.client_for(self.judge, self._thresholds()).ask(request, build)

    async def contextjudge_text(self, prompt: str, clients: InnerClients) -> tuple[str, Usage]:
        """The wrapped judge's text answer (thresholds apply to verdicts only)."""
        return await clients.client_for(self.judge, self._thresholds()).complete_text(prompt)

    # what the run reads from a judge: the wrapped judge's, except the identity
    @property
    def contextjudge_native(self) -> bool:
        """The wrapped judge's: whether it reads judge requests itself."""
        return bool(getattr(self.judge, "contextjudge_native", False))

    @property
    def contextjudge_deterministic(self) -> bool:
        """The wrapped judge's: whether it answers a request the same every time."""
        return bool(getattr(self.judge, "contextjudge_deterministic", False))

    @property
    def contextjudge_min_concurrency(self) -> int:
        """The wrapped judge's: the calls in flight it asks for."""
        return int(getattr(self.judge, "contextjudge_min_concurrency", 0) or 0)

    @property
    def supports_images(self) -> Any:
        """The wrapped judge's: whether it can be sent images."""
        return getattr(self.judge, "supports_images", None)

    @property
    def temperature(self) -> Any:
        """The wrapped judge's sampling temperature."""
        return getattr(self.judge, "temperature", None)

    # A direct call (not through the judge client) still gets the thresholds when the answer is plain JSON.
    def _adjusted(self, messages: list[BaseMessage], msg: Any) -> Any:
        request = None
        for m in reversed(messages):
            request = request_from_message_kwargs(getattr(m, "additional_kwargs", None) or {})
            if request is not None:
                break
        try:
            data = json.loads(msg.content) if request is not None and isinstance(msg.content, str) else None
        except json.JSONDecodeError:
            data = None
        if request is None or not isinstance(data, dict) or not isinstance(data.get("verdicts"), list):
            return msg
        by_id = {str(v.get("id")): v for v in data["verdicts"] if isinstance(v, dict)}
        self.calibration.adjust(request, by_id)
        return AIMessage(content=json.dumps(data, ensure_ascii=False),
                         usage_metadata=getattr(msg, "usage_metadata", None),
                         response_metadata=getattr(msg, "response_metadata", None) or {})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        msg = self.judge.invoke(messages, stop=stop)
        return ChatResult(generations=[ChatGeneration(message=self._adjusted(messages, msg))])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        msg = await self.judge.ainvoke(messages, stop=stop)
        return ChatResult(generations=[ChatGeneration(message=self._adjusted(messages, msg))])


def learned_hash(learned: dict[str, dict[str, list[float]]] | None,
                 memory: dict[str, dict[str, Any]] | None = None) -> str:
    """A short hash of fitted weights (rounded, so a rewrite of the same file keeps its identity) and of a label
    memory: part of the identity of the embedded judge that decides with them, and of a calibration's fingerprint."""
    canon: Any = {f: {k: [round(float(x), 6) for x in w] for k, w in sorted(ks.items())}
                  for f, ks in sorted((learned or {}).items())}
    if memory:  # without one the hash is the weights' alone, as files written before the memory have it
        canon = {"learned": canon, "memory": {f: {"kappa": round(float(m["kappa"]), 6), "beta": round(float(m["beta"]), 6),
                                                  "entries": [[str(e[0]), str(e[1]), bool(e[2])] for e in m["entries"]]}
                                              for f, m in sorted(memory.items())}}
    return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:16]


def combined_identity(identity: str, fingerprint: str) -> str:
    """The identity of a calibrated judge: its wrapped judge's (as called) and its thresholds."""
    return hashlib.sha256(f"{identity}|calibrated|{fingerprint}".encode()).hexdigest()[:20]
