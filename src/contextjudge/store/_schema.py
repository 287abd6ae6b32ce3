"""The results store's schema: one set of SQLAlchemy Core tables that SQLite and PostgreSQL both hold.

Bump ``SCHEMA_VERSION`` whenever a table changes, and teach ``_migrate`` in ``_store.py`` the step from the previous
version. JSON payloads are stored as text so that every backend reads them the same way.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["SCHEMA_VERSION", "TAG_SEP", "cases", "judge_calls", "label_log", "labels", "meta", "metadata", "nodes",
           "queue", "results", "runs", "spend", "verdict_cache", "verdicts"]

# 1: the first schema. 2: cj_results.gold_score and .score_spread, and the cj_labels table (issue 16).
# 3: cj_queue (cases waiting for a worker, with leases) and cj_spend (judge spend per budget window) (issue 17).
# 4: cj_results gains the columns that reads group and filter by (captured_at, retriever, tags, judge_identity,
#    input_key), backfilled from the JSON in place, with their indexes (issue 39).
# 5: gold labels keyed by node identity (positional ones migrated), the cj_label_log table (each label as given: who,
#    when, queue), cj_runs.goldens_hash / .goldens_name (issue 37).
SCHEMA_VERSION = 5

metadata = MetaData()

# key/value facts about the store itself, e.g. schema_version
meta = Table(
    "cj_meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "cj_runs", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("name", Text),
    Column("status", String(16), nullable=False),          # running | finished
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("fingerprint", String(64)),                      # hash of the code/config that produced the run
    Column("judges", Text),                                 # JSON list of {name, identity}
    Column("config", Text),                                 # JSON
    Column("summary", Text),                                # JSON, written by end_run
    Column("goldens_hash", String(64)),                     # content hash of the goldens the run ran (schema 5)
    Column("goldens_name", Text),                           # the goldens file's name (schema 5)
)

cases = Table(
    "cj_cases", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("case_key", String(255), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("kind", String(16), nullable=False),             # llm | conversational
    Column("name", Text),
    Column("input", Text),
    Column("actual_output", Text),
    Column("expected_output", Text),
    Column("fingerprint", String(64)),
    Column("data", Text, nullable=False),                   # the whole test case, JSON
    Column("created_at", Float, nullable=False),
    ForeignKeyConstraint(["run_id"], ["cj_runs.run_id"], ondelete="CASCADE"),
)
Index("ix_cj_cases_created", cases.c.created_at)

# the ranked retrieval of each case (turn 0 for a single-turn case; the turn's position for a conversation)
nodes = Table(
    "cj_nodes", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("case_key", String(255), primary_key=True),
    Column("turn", Integer, primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("node_id", Text),
    Column("text", Text, nullable=False),
    Column("score", Float),
    Column("node_metadata", Text),
    ForeignKeyConstraint(["run_id", "case_key"], ["cj_cases.run_id", "cj_cases.case_key"], ondelete="CASCADE"),
)

results = Table(
    "cj_results", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("case_key", String(255), primary_key=True),
    Column("metric", String(128), primary_key=True),
    Column("score", Float),
    Column("threshold", Float, nullable=False),
    Column("success", Boolean, nullable=False),
    Column("strict_mode", Boolean, nullable=False),
    Column("reason", Text),
    Column("error", Text),
    Column("error_type", String(128)),
    Column("evaluation_model", Text),
    Column("verbose_logs", Text),
    Column("usage", Text),                                  # JSON
    Column("details", Text),                                # JSON
    Column("created_at", Float, nullable=False),
    Column("gold_score", Float),                            # the score the case's gold labels give (schema 2)
    Column("score_spread", Float),                          # variance across judge repeats (schema 2)
    # what reads group and filter by, copied from the case and the details when the result is written (schema 4),
    # so `trend` and the drop check aggregate in SQL without decoding any JSON:
    Column("captured_at", Float),                           # the case's created_at (when it was captured)
    Column("retriever", Text),                              # the retriever the capture recorded, or NULL
    Column("tags", Text),                                   # the case's tags and call tags, TAG_SEP-joined and -framed
    Column("judge_identity", Text),                         # details["judge_identity"]: what changes the judge's answers
    Column("input_key", String(32)),                        # a hash of the normalised input: pairs cases by input
    ForeignKeyConstraint(["run_id"], ["cj_runs.run_id"], ondelete="CASCADE"),
)
# covering the trend's sums: a trend reads these indexes, never the (wide) rows
Index("ix_cj_results_captured", results.c.captured_at, results.c.metric, results.c.evaluation_model,
      results.c.judge_identity, results.c.score, results.c.success)
Index("ix_cj_results_judged", results.c.created_at, results.c.metric, results.c.evaluation_model,
      results.c.judge_identity, results.c.score, results.c.success)
Index("ix_cj_results_retriever", results.c.retriever, results.c.captured_at)
# the separator of cj_results.tags: the column reads "\x1fprod\x1fbeta\x1f", so a tag matches as "\x1fprod\x1f"
TAG_SEP = "\x1f"

verdicts = Table(
    "cj_verdicts", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("case_key", String(255), primary_key=True),
    Column("metric", String(128), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("item_id", Text),
    Column("rank", Integer),
    Column("statement", Text),
    Column("verdict", String(32)),
    Column("reason", Text),
    Column("data", Text, nullable=False),                   # the verdict dict, JSON
    ForeignKeyConstraint(["run_id", "case_key", "metric"],
                         ["cj_results.run_id", "cj_results.case_key", "cj_results.metric"], ondelete="CASCADE"),
)

judge_calls = Table(
    "cj_judge_calls", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(128), nullable=False),
    Column("judge", Text),
    Column("task", String(64)),
    Column("metric", String(128)),
    Column("method", String(32)),
    Column("cached", Boolean, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("cost", Float),
    Column("created_at", Float, nullable=False),
    ForeignKeyConstraint(["run_id"], ["cj_runs.run_id"], ondelete="CASCADE"),
)
Index("ix_cj_judge_calls_run", judge_calls.c.run_id)
# retention (`contextjudge prune`) finds old rows by time: indexes only, added to existing stores at open
Index("ix_cj_judge_calls_created", judge_calls.c.created_at)

# the judge-verdict cache shared by every run that uses this store
verdict_cache = Table(
    "cj_verdict_cache", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)
Index("ix_cj_verdict_cache_created", verdict_cache.c.created_at)

# gold labels attached to captured cases (`contextjudge label`), by case key, whatever run holds the case
labels = Table(
    "cj_labels", metadata,
    Column("case_key", String(255), primary_key=True),
    Column("input", Text),                                  # the case's input when the labels were attached
    Column("labels", Text, nullable=False),                 # JSON: the normalised label fields (cases/labels.py),
    Column("created_at", Float, nullable=False),            # node labels keyed by node identity (schema 5)
)

# every label as it was given (schema 5): who gave it, when, for which case and item, from which queue
# ("calibrate": cases chosen for what they teach; "estimate": a uniform random draw, the only kind the bias-corrected
# intervals may use). A value of None withdraws the item's earlier label (undo).
label_log = Table(
    "cj_label_log", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("case_key", String(255), nullable=False),
    Column("run_id", String(128)),
    Column("field", String(32), nullable=False),            # labels | relevance_labels | utilization_labels | ...
    Column("item", Text, nullable=False),                   # node hash (node fields) or statement text
    Column("value", Boolean),
    Column("who", String(255)),
    Column("queue", String(16)),
    Column("note", Text),
    Column("created_at", Float, nullable=False),
)
Index("ix_cj_label_log_case", label_log.c.case_key)

# cases waiting for a worker (`contextjudge worker`, capture mode "worker", the Ray engine): one row per stored case
# that is to be scored. A worker claims rows by setting owner and lease_until (an expired lease may be claimed
# again), and marks a row done in the same transaction that writes the case's results, only while it still holds
# the lease: so each case's results are written once, and a killed worker's cases return when their lease expires.
queue = Table(
    "cj_queue", metadata,
    Column("run_id", String(128), primary_key=True),
    Column("case_key", String(255), primary_key=True),
    Column("state", String(16), nullable=False),            # queued | claimed | done | skipped
    Column("owner", String(255)),                           # the worker holding the lease ("host:pid:random")
    Column("lease_until", Float),                           # time.time() at which the lease expires
    Column("attempts", Integer, nullable=False),            # claims so far (a case claimed too often is skipped)
    Column("priority", Integer, nullable=False),            # lower first; then enqueued_at
    Column("enqueued_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("note", Text),                                   # why a case was skipped (budget, too many attempts...)
    ForeignKeyConstraint(["run_id", "case_key"], ["cj_cases.run_id", "cj_cases.case_key"], ondelete="CASCADE"),
)
Index("ix_cj_queue_state", queue.c.state, queue.c.priority, queue.c.enqueued_at)
# the claim's second pick, claims whose lease has passed, oldest first (added to existing stores at open: an index
# only, no schema version)
Index("ix_cj_queue_lease", queue.c.state, queue.c.lease_until)

# judge spend per budget window, shared by every process of an app that uses this store (judges/_spend/): a call
# reserves its estimated tokens (and dollars) with one conditional UPDATE before it is sent, and settles the
# difference with its real usage after. ``scope`` names the budget (e.g. "tokens:day" of a judge), ``window`` the
# window's start (seconds since the epoch, a multiple of the window's length).
spend = Table(
    "cj_spend", metadata,
    Column("scope", String(255), primary_key=True),
    Column("window", Float, primary_key=True),
    Column("tokens", Integer, nullable=False),              # reserved or used tokens in this window
    Column("dollars", Float, nullable=False),               # reserved or used dollars in this window
    Column("calls", Integer, nullable=False),
    Column("refused", Integer, nullable=False),             # reservations refused (cases skipped) in this window
    Column("updated_at", Float, nullable=False),
)

# columns added after schema 1, by table: a store of version 1 gains them in ResultsStore._migrate
# (``_migrate`` adds them; which step adds which: 1 -> 2 ``ADDED_COLUMNS``, 3 -> 4 ``FACET_COLUMNS``, 4 -> 5
# ``GOLDENS_COLUMNS``)
ADDED_COLUMNS = {"cj_results": (("gold_score", "FLOAT"), ("score_spread", "FLOAT"))}
FACET_COLUMNS = {"cj_results": (("captured_at", "FLOAT"), ("retriever", "TEXT"), ("tags", "TEXT"),
                                ("judge_identity", "TEXT"), ("input_key", "VARCHAR(32)"))}
GOLDENS_COLUMNS = {"cj_runs": (("goldens_hash", "VARCHAR(64)"), ("goldens_name", "TEXT"))}
