"""Tiered judging on the development data: the embedded judge as the cheap tier, the gold labels as the strong one.

    python benchmarks/tiered.py --data-dir ../shared/data [--limit N] [--widths 0 0.1 0.2 0.3 0.4 0.6]

The strong tier is ``GoldJudge``, a LangChain chat model of this script that answers each judge request from the
gold labels of the data rows (a perfect strong judge: what an LLM judge could reach at best). The cheap tier is the
embedded judge (``model="local"``). For each band width w the band is [0.5 - w/2, 0.5 + w/2] around the embedded
judge's decision threshold (yes at confidence >= 0.5), through ``TieredJudge`` and the core metrics, as a user runs
it. Per data set and width: the share of items sent up, and the final verdicts' agreement with the gold labels
(accuracy, Cohen's kappa). Width 0 is the embedded judge alone.

Data sets and what an item is:
- hotpotqa: ContextualPrecisionMetric (reference: the gold answer); an item is a passage, gold = ``relevant``.
- clapnq: ContextualPrecisionMetric (reference: the long human answer); an item is a passage.
- trec_dl: ContextualRelevancyMetric (no reference); an item is a sentence of a passage, gold = its passage's
  ``relevant`` (grade >= 2), as the relevance labels of ``cases/labels.py`` apply a node's label to its sentences.
- mtrag: TurnContextualRelevancyMetric on the conversation; items as for trec_dl.

The table is printed, then one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from agreement import hotpotqa_case, load, mtrag_case, question_case  # noqa: E402

from contextjudge import LLMTestCase, evaluate  # noqa: E402
from contextjudge.judges._context import RunContext  # noqa: E402
from contextjudge.judges._local import LocalJudge  # noqa: E402
from contextjudge.judges._protocol import request_from_message_kwargs  # noqa: E402
from contextjudge.judges._tiered import TieredJudge  # noqa: E402
from contextjudge.metrics import (  # noqa: E402
    ContextualPrecisionMetric,
    ContextualRelevancyMetric,
    TurnContextualRelevancyMetric,
)
from contextjudge.stats import cohen_kappa  # noqa: E402

WIDTHS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.6)


def clapnq_case(r: dict[str, Any], passages: list[dict[str, Any]]) -> LLMTestCase:
    return LLMTestCase(input=r["question"], expected_output=r["reference_answer"],
                       retrieval_context=[p["text"] for p in passages])


# set -> (metric, case builder, the request input a row is found by)
SETS: dict[str, tuple[Any, Any, Any]] = {
    "hotpotqa": (ContextualPrecisionMetric, hotpotqa_case, lambda r: r["question"]),
    "clapnq": (ContextualPrecisionMetric, clapnq_case, lambda r: r["question"]),
    "trec_dl": (ContextualRelevancyMetric, question_case, lambda r: r["question"]),
    "mtrag": (TurnContextualRelevancyMetric, mtrag_case,
              lambda r: next(t["content"] for t in reversed(r["turns"]) if t["role"] == "user")),
}


class GoldJudge(BaseChatModel):
    """A strong judge that answers from the gold labels: a node (``n3``) or a sentence of a node (``n3.s2``, parent
    ``n3``) is "yes" iff the row's passage at that rank is labelled relevant. Rows are found by the request's input
    (the question, or a conversation's last user message)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    contextjudge_native: bool = True
    contextjudge_deterministic: bool = True
    _rows: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    items: int = 0

    def __init__(self, rows: dict[str, dict[str, Any]], **kw: Any) -> None:
        super().__init__(**kw)
        self._rows = rows

    @property
    def _llm_type(self) -> str:
        return "gold-labels"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "gold-labels", "rows": len(self._rows)}

    def label(self, request: Any, item: Any) -> bool:
        row = self._rows[request.input]
        node = item.parent or item.id
        rank = int(node[1:])
        passage = row["passages"][rank - 1]
        if not item.parent and passage["text"] != item.text:
            raise AssertionError(f"gold judge: {item.id} of {request.input[:60]!r} is not the row's passage")
        return bool(passage["relevant"])

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        request = None
        for m in reversed(messages):
            request = request_from_message_kwargs(getattr(m, "additional_kwargs", None) or {})
            if request is not None:
                break
        if request is None:
            raise ValueError("GoldJudge only answers contextjudge judge requests")
        verdicts = [{"id": it.id, "verdict": "yes" if self.label(request, it) else "no", "reason": "gold label"}
                    for it in request.items]
        self.items += len(verdicts)
        body = json.dumps({"verdicts": verdicts})
        return ChatResult(generations=[ChatGeneration(message=AIMessage(
            content=body, usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}))])


def agreement(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
    tp = sum(v and g for v, g in pairs)
    fp = sum(v and not g for v, g in pairs)
    fn = sum(g and not v for v, g in pairs)
    tn = len(pairs) - tp - fp - fn
    return {"items": len(pairs), "accuracy": (tp + tn) / len(pairs), "kappa": cohen_kappa(tp, fp, fn, tn),
            "false_yes": fp, "false_no": fn}


def run_set(name: str, rows: list[dict[str, Any]], local: LocalJudge, widths: list[float]) -> dict[str, Any]:
    metric_cls, make_case, key = SETS[name]
    by_input: dict[str, dict[str, Any]] = {}
    dupes = set()
    for r in rows:
        k = key(r)
        if k in by_input:
            dupes.add(k)
        by_input[k] = r
    rows = [r for r in rows if key(r) not in dupes]  # a request's input must name one row
    gold = GoldJudge({key(r): r for r in rows})
    cases = [make_case(r, r["passages"]) for r in rows]
    ctx = RunContext()  # one run context: the cheap verdicts and the gold answers are cached across widths
    out: dict[str, Any] = {"rows": len(rows), "rows_left_out": len(dupes), "widths": {}}
    for w in widths:
        band = (round(0.5 - w / 2, 4), round(0.5 + w / 2, 4))
        judge = TieredJudge(gold, cheap=local, band=band)
        t0 = time.perf_counter()
        res = evaluate(cases, [metric_cls(model=judge)], show_progress=False, raise_exceptions=True, context=ctx)
        secs = time.perf_counter() - t0
        pairs = []
        for r, tr in zip(rows, res.test_results, strict=True):
            m = tr.metrics_data[0]
            for v in m.verdicts:
                node = v["id"].split(".")[0]  # "n3" or "n3.s2": the passage at rank 3
                pairs.append((v["verdict"] == "yes", bool(r["passages"][int(node[1:]) - 1]["relevant"])))
        tiers = res.tiers or {}
        items = tiers.get("cheap", {}).get("items", 0)
        up = tiers.get("strong", {}).get("items", 0)
        out["widths"][w] = {"band": list(band), "sent_up": up / items if items else None, "items_up": up,
                            **agreement(pairs), "seconds": round(secs, 1)}
        print(f"{name} width {w}: {json.dumps(out['widths'][w])}", file=sys.stderr, flush=True)
    return out


def table(figures: dict[str, Any]) -> str:
    head = f"{'set':<9} {'width':>5} {'band':>11} {'items':>6} {'sent up':>8} {'accuracy':>9} {'kappa':>7} " \
           f"{'false yes':>9} {'false no':>8}"
    lines = [head, "-" * len(head)]
    for name, fig in figures.items():
        for w, row in fig["widths"].items():
            band = f"{row['band'][0]:.2f}-{row['band'][1]:.2f}"
            kappa = "-" if row["kappa"] is None else f"{row['kappa']:.3f}"
            lines.append(f"{name:<9} {w:>5.2f} {band:>11} {row['items']:>6} {row['sent_up']:>8.1%} "
                         f"{row['accuracy']:>9.3f} {kappa:>7} {row['false_yes']:>9} {row['false_no']:>8}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="directory with hotpotqa_dev.jsonl, trec_dl_dev.jsonl, ...")
    ap.add_argument("--limit", type=int, default=None, help="use the first N rows of each file")
    ap.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    ap.add_argument("--widths", nargs="+", type=float, default=list(WIDTHS),
                    help="band widths around 0.5 (0 = the embedded judge alone)")
    args = ap.parse_args()
    local = LocalJudge()
    t0 = time.perf_counter()
    figures = {}
    for name in args.sets:
        rows = load(args.data_dir, name, args.limit)
        figures[name] = run_set(name, rows, local, sorted(set(args.widths)))
    print(table(figures))
    print(json.dumps({"figures": figures, "judge": dict(local._identifying_params),  # noqa: SLF001
                      "total_seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
