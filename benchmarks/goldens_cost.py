"""Cost per golden: calls and tokens of `contextjudge goldens generate`, measured, beside its --dry-run estimate.

    python benchmarks/goldens_cost.py [--per-chunk 3] [--peers] [--json]

The documents are the bundled demo corpus (src/contextjudge/data/demo_corpus/docs.json, 30-odd short policy
documents, each one chunk under its own id). The question writer is the loopback OpenAI-compatible server the judge
benchmarks use (``tests/fault_server.py``, reached through ``ChatOpenAI(base_url=...)``), answering the writer's
prompts with the scripted writer of the tests (``tests/goldens_writer.py``: one question per asked style, its answer
a sentence of the passage), so the figures are the prompts' and the JSON answers' real token counts (tiktoken's
o200k_base, offline) and not a model's quality. Each row checks the goldens with a different judge: none
(``--no-check``), the embedded judge (free: calls but no billed tokens), and the same loopback server as an LLM judge.

With ``--peers``, DeepEval's Synthesizer (``generate_goldens_from_contexts``, one context per document, the same
number of goldens asked per context, every other setting at its default: filtration, one evolution, expected
outputs) and Ragas' TestsetGenerator (as many samples asked as we ask questions, its defaults) each run in their own
venv (``_peers/common.py``) against the same server. The server answers DeepEval's structured-output prompts with
plausible JSON built from their schemas (two inputs a context, every quality score 1.0, so no re-generation), and
Ragas' prompts with JSON built from the schema written in the prompt and the prompt's own input
(``_peers/schema_answers.py``); its embeddings come from the server's ``/v1/embeddings`` (word-hashed vectors), counted
apart. Both peers' figures are a floor for what a real model's answers would cost.

Ragas: ``generate_with_langchain_docs`` refuses the demo documents (``ValueError: Documents appears to be too short
(ie 100 tokens or less)``, raised by ``ragas.testset.transforms.default_transforms`` before any call: its default
transforms need a quarter of the documents over 100 tokens, and these are about 25 to 46), so the runner
(``_peers/run_ragas_testset.py``) records that refusal and runs ``generate_with_chunks``, Ragas' road for documents
already chunked (each document one chunk). The runner runs the generator inside one event loop: Ragas runs each step
under its own ``asyncio.run``, and the OpenAI client's pooled connections from the first loop fail the next step with
"Event loop is closed" (Ragas issues #1718, #1381). Ragas' venv also needs ``rapidfuzz`` (its entity-overlap step
imports it) and reads tiktoken's cl100k_base from llama-index-core's bundled copy (offline).

The table ends with the ``--dry-run`` estimate beside what was billed (writing output; with the LLM judge, output and
input, the input with the structured-output schema each check call sends, which a provider bills as input).

What this does not measure: how many questions a real model's answers lose to the checks (the scripted writer's
answers are all supported), nor the quality of any tool's questions.
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


def _deepeval(server: FaultServer, docs: list, per: int) -> dict:
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from _peers.common import TELEMETRY_OFF, default_cache_dir, peer_python  # noqa: PLC0415

    py = peer_python("deepeval", default_cache_dir(), log=lambda m: print(m, file=sys.stderr))
    work = Path(tempfile.mkdtemp(prefix="goldens-cost-"))
    ctx, out = work / "contexts.json", work / "out.json"
    ctx.write_text(json.dumps([[d.page_content] for d in docs]))
    env = {**os.environ, **TELEMETRY_OFF, "OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": server.url,
           "DEEPEVAL_HOME": str(work / ".deepeval")}
    for k in ("TIKTOKEN_CACHE_DIR", "PYTHONPATH"):
        env.pop(k, None)
    before = server.totals()
    proc = subprocess.run([str(py), str(Path(__file__).parent / "_peers" / "run_deepeval_synth.py"), str(ctx),
                           str(out), "--base-url", server.url, "--per-context", str(per)],
                          env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"DeepEval's Synthesizer failed:\n{proc.stderr[-2000:]}")
    after = server.totals()
    served = {k: after[k] - before.get(k, 0) for k in after}
    made = json.loads(out.read_text())
    n = made["goldens"] or 1
    return {"check": "DeepEval Synthesizer (defaults)", "chunks": len(docs), "asked": len(docs) * per,
            "kept": made["goldens"], "dropped": None, "calls": served["calls"], "billed_calls": served["calls"],
            "input_tokens": served["prompt_tokens"], "output_tokens": served["completion_tokens"],
            "calls_per_golden": served["calls"] / n,
            "tokens_per_golden": (served["prompt_tokens"] + served["completion_tokens"]) / n,
            "estimate_calls": "-", "estimate_tokens": "-"}


def _ragas(server: FaultServer, docs: list, per: int) -> dict:
    """Ragas' TestsetGenerator in its own venv against ``server``, asked for as many samples as we ask questions."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    from _peers.common import TELEMETRY_OFF, default_cache_dir, peer_python, tiktoken_cache  # noqa: PLC0415
    from _peers.schema_answers import SchemaAnswerer  # noqa: PLC0415
    from fault_server import _embedded_schema  # noqa: PLC0415

    py = peer_python("ragas", default_cache_dir(), log=lambda m: print(m, file=sys.stderr))
    work = Path(tempfile.mkdtemp(prefix="goldens-cost-"))
    src, out = work / "docs.json", work / "out.json"
    src.write_text(json.dumps([{"id": d.id, "text": d.page_content} for d in docs]))
    # Ragas counts tokens with tiktoken (cl100k_base) to pick its transforms: the encoding bundled with
    # llama-index-core, offline
    env = {**os.environ, **TELEMETRY_OFF, "OPENAI_API_KEY": "sk-fake", "OPENAI_BASE_URL": server.url,
           "TIKTOKEN_CACHE_DIR": tiktoken_cache()}
    env.pop("PYTHONPATH", None)
    answers = SchemaAnswerer(_embedded_schema)
    server.text_answer, before_answer = answers.answer, server.text_answer
    before, emb_before = server.totals(), server.embedding_totals()
    try:
        proc = subprocess.run([str(py), str(Path(__file__).parent / "_peers" / "run_ragas_testset.py"), str(src),
                               str(out), "--base-url", server.url, "--size", str(len(docs) * per)],
                              env=env, capture_output=True, text=True, timeout=1800)
    finally:
        server.text_answer = before_answer
    if proc.returncode != 0:
        raise SystemExit(f"Ragas' TestsetGenerator failed:\n{proc.stderr[-3000:]}")
    after, emb_after = server.totals(), server.embedding_totals()
    served = {k: after[k] - before.get(k, 0) for k in after}
    emb = {k: emb_after[k] - emb_before.get(k, 0) for k in emb_after}
    made = json.loads(out.read_text())
    n = made["goldens"] or 1
    note = (f"{made['road']} made {made['goldens']} sample(s) ({', '.join(made['synthesizers'])}); plus "
            f"{emb['calls']} embedding call(s), {emb['tokens']:,} tokens, not in the chat figures")
    if made["refusal"]:
        note += f"; generate_with_langchain_docs refused these documents first: {made['refusal']}"
    return {"check": "Ragas TestsetGenerator (defaults)", "chunks": len(docs), "asked": len(docs) * per,
            "kept": made["goldens"], "dropped": None, "calls": served["calls"], "billed_calls": served["calls"],
            "input_tokens": served["prompt_tokens"], "output_tokens": served["completion_tokens"],
            "calls_per_golden": served["calls"] / n,
            "tokens_per_golden": (served["prompt_tokens"] + served["completion_tokens"]) / n,
            "estimate_calls": "-", "estimate_tokens": "-", "embedding_calls": emb["calls"],
            "embedding_tokens": emb["tokens"], "note": note}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-chunk", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--peers", action="store_true",
                    help="also DeepEval's Synthesizer and Ragas' TestsetGenerator (each creates its venv once)")
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
            billed_check = check and judge is not None and judge != "local"
            rows.append({
                "check": label, "chunks": len(docs), "asked": est.questions, "kept": len(res.goldens),
                "dropped": len(res.dropped), "calls": res.usage["calls"],
                "billed_calls": served.get("calls", 0),
                "input_tokens": served.get("prompt_tokens", 0), "output_tokens": served.get("completion_tokens", 0),
                "calls_per_golden": served.get("calls", 0) / n,
                "tokens_per_golden": (served.get("prompt_tokens", 0) + served.get("completion_tokens", 0)) / n,
                "estimate_calls": est.calls + (est.check_calls if billed_check else 0),
                "estimate_input_tokens": est.input_tokens + (est.check_input_tokens if billed_check else 0),
                "estimate_output_tokens": est.output_tokens + (est.check_output_tokens if billed_check else 0),
                # the writing alone, where the estimate's answer sizes are assumed: estimate vs measured
                "writing_output_estimate": est.output_tokens,
                "writing_output_measured": res.usage["writing"]["output_tokens"],
                "schema_tokens": served.get("schema_tokens", 0),
                "estimate_schema_tokens": est.check_schema_tokens if billed_check else 0,
            })
        if args.peers:
            rows.append(_deepeval(server, docs, args.per_chunk))
            rows.append(_ragas(server, docs, args.per_chunk))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"Demo corpus: {len(docs)} documents, {args.per_chunk} question(s) asked per chunk, the default styles; "
          "billed = what the loopback server answered (o200k_base tokens).\n")
    print("| tool, check | kept / asked | billed calls | input + output tokens | calls per golden | tokens per golden | "
          "--dry-run estimate: calls, input + output tokens |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['check']} | {r['kept']} / {r['asked']} | {r['billed_calls']} | "
              f"{r['input_tokens']:,} + {r['output_tokens']:,} | {r['calls_per_golden']:.2f} | "
              f"{r['tokens_per_golden']:,.0f} | {_est(r)} |")
    ours = next(r for r in rows if r.get("writing_output_estimate") is not None)
    est, got = ours["writing_output_estimate"], ours["writing_output_measured"]
    print(f"\n--dry-run estimate / measured: writing output tokens {est:,} / {got:,} = {est / max(1, got):.2f}", end="")
    llm = next((r for r in rows if r["check"].startswith("LLM judge")), None)
    if llm is not None:
        print(f"; with the LLM judge, output tokens {llm['estimate_output_tokens']:,} / {llm['output_tokens']:,} = "
              f"{llm['estimate_output_tokens'] / max(1, llm['output_tokens']):.2f}, input tokens "
              f"{llm['estimate_input_tokens']:,} / {llm['input_tokens']:,} = "
              f"{llm['estimate_input_tokens'] / max(1, llm['input_tokens']):.2f}, of which the structured-output "
              f"schema each check call sends, billed as input: {llm['estimate_schema_tokens']:,} estimated, "
              f"{llm.get('schema_tokens', 0):,} billed ({llm['estimate_calls']} calls estimated, "
              f"{llm['billed_calls']} made)", end="")
    print(".")
    for r in rows:
        if r.get("note"):
            print(f"\n{r['check']}: {r['note']}")
    return 0


def _est(r: dict) -> str:
    if r["estimate_calls"] == "-":
        return "-"
    return f"{r['estimate_calls']}, {r['estimate_input_tokens']:,} + {r['estimate_output_tokens']:,}"


if __name__ == "__main__":
    raise SystemExit(main())
