"""``contextjudge compare --fail-on-regression``: the paired differences (paired-t intervals) and the gate's exact sign
test over the cases both runs scored, on real SQLite stores.

Each run is a real ``evaluate`` of ContextualPrecisionMetric with a scripted judge that calls exactly one node of each
case useful, so where a run ranks that node fixes the case's score: rank 1 -> 1.0, rank 2 -> 0.5, rank 3 -> 1/3.
"""

from __future__ import annotations

import pytest

from contextjudge import LLMTestCase, evaluate
from contextjudge.cli import main
from contextjudge.metrics import ContextualPrecisionMetric
from contextjudge.report import compare_runs
from contextjudge.store import open_store
from contextjudge.testing import FakeJudge

PRECISION = "Contextual Precision"


def _case(i: int, rank: int, *, prefix: str = "q") -> LLMTestCase:
    """Case ``i`` with its one useful node at ``rank`` (1-3) among three nodes."""
    useful = f"USEFUL fact number {i}."
    others = [f"Filler text {i}-a.", f"Filler text {i}-b."]
    nodes = others[: rank - 1] + [useful] + others[rank - 1:]
    return LLMTestCase(input=f"{prefix} question {i}?", actual_output=f"answer {i}", expected_output=f"answer {i}",
                       retrieval_context=nodes)


def _run(db: str, run_id: str, ranks: list[int], *, prefix: str = "q") -> None:
    judge = FakeJudge(rules={"USEFUL": "yes"}, default="no")
    evaluate([_case(i, r, prefix=prefix) for i, r in enumerate(ranks)], [ContextualPrecisionMetric(model=judge)],
             store=db, run_id=run_id, show_progress=False)


def _compare(capsys, db: str, *extra: str) -> tuple[int, str]:
    rc = main(["compare", "base", "cur", "--store", db, *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out


def _row(out: str, metric: str = PRECISION) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(metric))


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "runs.db")


def test_significantly_worse_exits_1_and_lists_the_cases_that_changed_most(capsys, db):
    # every case drops: from rank 1 to rank 2 (-0.5) or rank 3 (-2/3)
    _run(db, "base", [1] * 8)
    _run(db, "cur", [2, 3, 2, 3, 2, 3, 2, 3])
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 1
    assert "FAILED: dropped on Contextual Precision (8 worse, 0 better, sign test p = 0.0039)" in out
    row = _row(out)
    assert "-0.583" in row and " 8 " in row and row.rstrip().endswith("worse")
    assert "paired-t" in out.splitlines()[0]
    # the five cases that changed most: the four rank-3 drops (-0.667) first, then one rank-2 drop
    section = out.split("Cases that changed most on Contextual Precision (top 5 by |difference|):")[1]
    lines = [ln for ln in section.splitlines()[3:] if ln.strip()][:5]
    assert [ln.split()[-1] for ln in lines] == ["-0.667", "-0.667", "-0.667", "-0.667", "-0.500"]
    assert "q question 1?" in lines[0] and "1.000" in lines[0] and "0.333" in lines[0]
    # without the flag the same comparison is only a report
    assert _compare(capsys, db)[0] == 0


def test_worse_but_not_significant_exits_0(capsys, db):
    # two cases drop a lot, one improves, one unchanged: the mean is down but the interval spans zero
    _run(db, "base", [1, 1, 3, 2])
    _run(db, "cur", [3, 3, 1, 2])
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 0, out
    row = _row(out)
    assert "-0.167" in row and "too few cases to tell" in row  # four pairs cannot settle it (issue 35)
    assert "[-1.000, +0.848]" in row  # clipped to what a difference of two scores can be
    assert "FAILED" not in out
    section = out.split("Cases that changed most on Contextual Precision (top 3 by |difference|):")[1]
    assert "+0.667" in section and "question 3" not in section  # the unchanged case is not listed


def test_better_exits_0(capsys, db):
    _run(db, "base", [3, 2, 3, 2, 3])
    _run(db, "cur", [1, 1, 1, 1, 1])
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 0 and row_reading(out) == "better"


def row_reading(out: str) -> str:
    return _row(out).split()[-1]


def test_runs_with_no_shared_cases_exit_0_and_say_so(capsys, db):
    _run(db, "base", [1, 1, 1])
    _run(db, "cur", [3, 3, 3], prefix="other")  # other inputs, generated ids: nothing pairs
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 0
    assert "no shared cases" in _row(out)
    assert "Contextual Precision: no shared cases (no case has a score in both runs); not compared" in out
    assert "Cases that changed most" not in out


def test_a_metric_only_one_run_scored_never_fails(capsys, db):
    from contextjudge.metrics import ContextualRecallMetric

    judge = FakeJudge(rules={"USEFUL": "yes"}, default="no")
    evaluate([_case(i, 1) for i in range(4)], [ContextualPrecisionMetric(model=judge),
                                               ContextualRecallMetric(model=judge)],
             store=db, run_id="base", show_progress=False)
    _run(db, "cur", [1, 1, 1, 1])
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 0
    assert "Contextual Recall: no shared cases (only the baseline scored it)" in out
    assert "no clear change" in _row(out)  # precision: identical scores, a zero-width interval at 0


def test_compare_runs_gives_the_hand_computed_paired_t_interval(db):
    # differences -0.5, -0.5, -2/3, -2/3: mean -7/12, s^2 = 4 * (1/12)^2 / 3 = 1/108, se = sqrt(1/432),
    # t_3 = 3.1824 -> half-width 0.15312
    _run(db, "base", [1, 1, 1, 1])
    _run(db, "cur", [2, 2, 3, 3])
    s = open_store(db)
    try:
        [change] = compare_runs(s.load_run("cur"), s.load_run("base"))
    finally:
        s.close()
    iv = change.difference
    assert iv.estimate == pytest.approx(-7 / 12)
    assert iv.low == pytest.approx(-7 / 12 - 0.15312, abs=2e-4)
    assert iv.high == pytest.approx(-7 / 12 + 0.15312, abs=2e-4)
    assert iv.n == 4 and iv.method == "paired-t"
    assert change.reading == "worse" and change.significantly_worse
    assert [round(c.difference, 3) for c in change.top_cases] == [-0.667, -0.667, -0.5, -0.5]
    assert change.top_cases[0].text == "q question 2?" and change.top_cases[0].baseline == 1.0


def test_cases_pair_by_id_before_input(capsys, db):
    judge = FakeJudge(rules={"USEFUL": "yes"}, default="no")
    base = [_case(i, 1) for i in range(6)]  # six drops: the sign test's p is 1/64 (four could not reach 5%)
    cur = [_case(i, 3, prefix="reworded") for i in range(6)]
    for i, (b, c) in enumerate(zip(base, cur, strict=True)):
        b.id = c.id = f"case-{i}"
    evaluate(base, [ContextualPrecisionMetric(model=judge)], store=db, run_id="base", show_progress=False)
    evaluate(cur, [ContextualPrecisionMetric(model=judge)], store=db, run_id="cur", show_progress=False)
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 1 and " 6 " in _row(out) and "-0.667" in _row(out)


def test_compare_covers_faithfulness_and_a_ranking_metric(capsys, db):
    """A reranker change seen by MRR (no judge) and an answer change seen by faithfulness, in one comparison."""
    from contextjudge.cases.testcase import RetrievedNode
    from contextjudge.metrics import FaithfulnessMetric, MRRMetric

    def run(run_id: str, rank: int, answer: str) -> None:
        cases = []
        for i in range(8):
            nodes = [RetrievedNode(f"Filler text {i}-{k}.", id=f"f{i}-{k}") for k in range(2)]
            nodes.insert(rank - 1, RetrievedNode(f"USEFUL fact number {i}.", id=f"u{i}"))
            cases.append(LLMTestCase(input=f"q question {i}?", actual_output=f"USEFUL fact number {i}.{answer}",
                                     retrieval_context=nodes, expected_context_ids=[f"u{i}"]))
        judge = FakeJudge(rules={"USEFUL": "yes"}, default="no")
        evaluate(cases, [FaithfulnessMetric(model=judge), MRRMetric()], store=db, run_id=run_id, show_progress=False)

    run("base", 1, "")  # every statement supported: faithfulness 1.0
    run("cur", 2, " It is made up.")  # one of two: 0.5
    rc, out = _compare(capsys, db, "--fail-on-regression")
    assert rc == 1 and "FAILED: dropped on" in out
    assert "-0.500" in _row(out, "MRR") and _row(out, "MRR").rstrip().endswith("worse")
    assert "-0.500" in _row(out, "Faithfulness") and _row(out, "Faithfulness").rstrip().endswith("worse")
