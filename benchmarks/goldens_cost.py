"""Cost per golden: calls and tokens of `contextjudge goldens generate`, measured, beside its --dry-run estimate.

    python benchmarks/goldens_cost.py [--per-chunk 3] [--json]

The documents are the bundled demo corpus (src/contextjudge/data/demo_corpus/docs.json, 30-odd short policy
documents, each one chunk under its own id). The question writer is the loopback OpenAI-compatible server the judge
benchmarks use (``tests/fault_server.py``, reached through ``ChatOpenAI(base_url=...)``), answering the writer's
prompts with the scripted writer of the tests (``tests/goldens_writer.py``: one question per asked style, its answer
a sentence of the passage), so the figures are the prompts' and the JSON answers' real token counts (tiktoken's
o200k_base, offline) and not a model's quality. Each row checks the goldens with a different judge: none
(``--no-check``), the embedded judge (free: calls but no billed tokens), and the same loopback server as an LLM judge.

What this does not measure: how many questions a real model's answers lose to the checks (the scripted writer's
answers are all supported), and the peers' cost on the same documents (DeepEval's Synthesizer and Ragas'
TestsetGenerator need embedding models and a knowledge-graph build offline; not run here).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))

from _peers.common import token_counter  # noqa: E402
from fault_server import FaultServer  # noqa: E402
from goldens_writer import ScriptedWriter  # noqa: E402


def _documents() -> list:
    from langchain_core.documents import Document  # noqa: PLC0415

    data = json.loads((ROOT / "src/contextjudge/data/demo_corpus/docs.json").read_text(encoding="utf-8"))
    return [Document(id=d["id"], page_content=d["text"], metadata={"source": d["id"], "title": d["title"]})
            for d in data["documents"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-chunk", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from langchain_openai import ChatOpenAI  # noqa: PLC0415

    from contextjudge.goldens import generate  # noqa: PLC0415

    docs = _documents()
    writer = ScriptedWriter()
    rows = []
    with FaultServer(text_answer=lambda p: writer._reply(p) if "<passage_A>" in p else None,  # noqa: SLF001
                     verdict=lambda text, _: "yes", count_tokens=token_counter()) as server:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=server.url, api_key="sk-bench", max_retries=0)
        for label, judge, check in (("no check", None, False), ("embedded judge", "local", True),
                                    ("LLM judge (gpt-4o-mini, loopback)", model, True)):
            est = generate(docs, model=model, per_chunk=args.per_chunk, judge=judge or "local", check=check,
                           dry_run=True).estimate
            before = server.totals()
            res = generate(docs, model=model, per_chunk=args.per_chunk, judge=judge or "local", check=check)
            after = server.totals()
            served = {k: after[k] - before.get(k, 0) for k in after}
            n = len(res.goldens) or 1
            rows.append({
                "check": label, "chunks": len(docs), "asked": est.questions, "kept": len(res.goldens),
                "dropped": len(res.dropped), "calls": res.usage["calls"],
                "billed_calls": served.get("calls", 0),
                "input_tokens": served.get("prompt_tokens", 0), "output_tokens": served.get("completion_tokens", 0),
                "calls_per_golden": served.get("calls", 0) / n,
                "tokens_per_golden": (served.get("prompt_tokens", 0) + served.get("completion_tokens", 0)) / n,
                "estimate_calls": est.calls + (est.check_calls if check and judge is not None and judge != "local"
                                               else 0),
                "estimate_tokens": est.input_tokens + est.output_tokens + (
                    est.check_input_tokens + est.check_output_tokens
                    if check and judge is not None and judge != "local" else 0),
            })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"Demo corpus: {len(docs)} documents, {args.per_chunk} question(s) asked per chunk, all five styles; "
          "billed = what the loopback server answered (o200k_base tokens).\n")
    print("| check | kept / asked | billed calls | input + output tokens | calls per golden | tokens per golden | "
          "--dry-run estimate (calls, tokens) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['check']} | {r['kept']} / {r['asked']} | {r['billed_calls']} | "
              f"{r['input_tokens']:,} + {r['output_tokens']:,} | {r['calls_per_golden']:.2f} | "
              f"{r['tokens_per_golden']:,.0f} | {r['estimate_calls']}, {r['estimate_tokens']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
