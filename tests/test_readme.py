"""The README's commands give what the README says they give (its Python snippets, and those of docs/*.md, are run
by test_doc_snippets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("app", ["examples.hr_app:chain", "examples.hr_app:build_agent()"])
def test_the_readme_eval_command_on_the_example_app(app: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """The README's `contextjudge eval` example: the right retriever passes by default (exit 0, as printed there),
    relevancy shown but not gated with the embedded judge uncalibrated; a threshold of its own makes it gate."""
    pytest.importorskip("contextjudge_langchain")
    if "agent" in app:
        pytest.importorskip("langchain.agents")
    from contextjudge.cli import main

    monkeypatch.chdir(ROOT)
    common = ["eval", "--app", app, "--goldens", "examples/goldens.jsonl", "--model", "local",
              "--store", str(tmp_path / "r.db"), "--no-progress"]
    assert main(common) == 0
    out = capsys.readouterr().out
    assert "not gated (would fail: mean 0.242 < 0.50)" in out and "15 case(s), 0 with an error" in out
    assert "\nnot gated: Contextual Relevancy, Context Utilization, Faithfulness (shown only" in out
    assert main([*common, "--threshold", "contextual_relevancy=0.5"]) == 1
    assert "FAILED: Contextual Relevancy: mean 0.242 < 0.50" in capsys.readouterr().out
    assert main([*common, "--threshold", "contextual_relevancy=0.2"]) == 0


@pytest.mark.slow
def test_the_readme_calibrate_commands_on_the_example_labels(tmp_path: Path, monkeypatch, capsys) -> None:
    """"How far to trust a score": eval, label, calibrate in three commands, with the kappas the README quotes."""
    pytest.importorskip("contextjudge_langchain")
    import json

    from contextjudge.cli import main

    monkeypatch.chdir(ROOT)
    db = str(tmp_path / "cj.db")
    assert main(["eval", "--app", "examples.hr_app:chain", "--goldens", "examples/goldens.jsonl", "--model", "local",
                 "--store", db, "--no-progress"]) == 0  # the right retriever passes, as in the eval example
    assert main(["label", "--store", db, "examples/labels.jsonl"]) == 0
    assert "labelled 15 case(s)" in capsys.readouterr().out
    saved = tmp_path / "cal.json"
    assert main(["calibrate", "--store", db, "--model", "local", "--json", "--save", str(saved)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert round(report["node_usefulness"]["kappa"], 2) == 0.61
    assert [round(x, 2) for x in report["node_usefulness"]["kappa_ci"]] == [0.40, 0.86]
    assert round(report["sentence_relevance"]["kappa"], 2) == 0.70  # node decisions (issue 47)
    assert [round(x, 2) for x in report["sentence_relevance"]["kappa_ci"]] == [0.47, 0.86]
    assert [round(report[f]["kappa_cv"], 2) for f in ("node_usefulness", "sentence_relevance")] == [0.81, 0.76]  # usefulness keeps a label memory
    assert {"node_usefulness", "sentence_relevance"} <= set(json.loads(saved.read_text())["learned"])
    # the same figures from the labels file alone, without a store
    assert main(["calibrate", "--labels", "examples/labels.jsonl", "--model", "local", "--json", "--no-save"]) == 0
    assert round(json.loads(capsys.readouterr().out)["node_usefulness"]["kappa"], 2) == 0.61
