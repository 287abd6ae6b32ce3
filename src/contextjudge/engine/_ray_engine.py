"""The Ray engine: score a store's cases on a Ray cluster (or a local Ray instance) with long-lived actors.

    contextjudge score --store postgresql+psycopg://... --engine ray --address ray://head:10001 --workers 32
    evaluate(cases, metrics, model="local", engine="ray", workers=2)          # a local Ray instance

Design: each actor is one long-lived Ray process (``num_cpus=1``) that builds its judge once (the embedded judge's
model loads once per actor, not per batch or case) and runs the existing ``engine._worker.Worker`` claim loop
(``run(once=True)``) against the shared store. So every property of the store's queue (``store/_queue.py``) holds:
cases are claimed in batches with leases, each case's results are written in ONE transaction and only while its
lease is held (written once), a killed actor's cases come back when their leases expire (only the judge calls in
flight are repeated), and the verdict cache and the ``RateLimit`` / ``Budget`` of ``JudgeOptions`` are shared by
every actor through the store. Two actors may both judge an item the verdict cache missed at the same moment: that
is allowed (the cache is an optimisation; each case's results are still written once).

The driver (this module, in the caller's process) writes or enqueues the cases, starts the actors, waits for them,
replaces an actor that died, starts another round while cases remain claimable (a dead actor's leases expire), and
ends the run. Ray is optional: nothing here imports it before it is needed (``import contextjudge`` never does).

Stores: PostgreSQL for clusters; SQLite for a local Ray instance (the actors share the file knowingly:
``Worker(exclusive=False)``; each claim is one atomic UPDATE ... RETURNING and SQLite serialises the writers).
"""

from __future__ import annotations

import copy
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._locks import try_lock
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..store import ResultsStore

__all__ = ["INSTALL_HINT", "RayEngine", "RayScore", "copy_run", "evaluate_on_ray", "finish_run", "require_ray",
           "score_run"]

logger = logging.getLogger("contextjudge")

INSTALL_HINT = 'pip install "contextjudge[ray]"'

# judge-related settings the actors need from the driver's environment (a cluster's workers do not share it)
_FORWARDED_ENV = ("OPENAI_", "CONTEXTJUDGE_", "ANTHROPIC_", "AZURE_OPENAI_", "GOOGLE_API_KEY", "MISTRAL_API_KEY")
_ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "NUMEXPR_NUM_THREADS": "1"}


def require_ray() -> Any:
    """The ``ray`` module, or a ``ConfigurationError`` that says how to install it."""
    try:
        import ray  # noqa: PLC0415 - optional dependency, loaded only by the Ray engine
    except ImportError as exc:
        raise ConfigurationError(f"engine='ray' needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


# ---------------------------------------------------------------------------------------------------- the actor
_HELD_CORE_LOCKS: list[Any] = []


def _pin_one_core() -> int | None:
    """Pin this (actor) process, every thread of it, to one core no other actor on this machine holds (an OS file
    lock per core, released when the process ends however it ends); None when every core is taken or there is
    one. The embedded judge sizes its encoder's thread pool from the affinity, so it then uses one thread."""
    from ._worker import pin_threads, usable_cores  # noqa: PLC0415

    usable = usable_cores()
    if len(usable) <= 1 or not hasattr(os, "sched_setaffinity"):
        return None
    for core in usable:
        fh = open(os.path.join(tempfile.gettempdir(), f"contextjudge-ray-core-{core}.lock"), "a+")  # noqa: SIM115
        if try_lock(fh):
            _HELD_CORE_LOCKS.append(fh)  # kept open: the lock lives with the process
            pin_threads([core])
            return core
        fh.close()
    return None


class _Rebuild:
    """A chat model shipped as its class and the fields it was given (those that pickle): its clients, locks and
    loaded weights are built again in the actor, once."""

    def __init__(self, model: Any, dumps: Callable[[Any], bytes]) -> None:
        self.cls = type(model)
        self.fields: dict[str, Any] = {}
        for name in sorted(getattr(model, "model_fields_set", ()) or ()):
            value = getattr(model, name, None)
            try:
                dumps(value)
            except Exception:  # noqa: BLE001, S112 - a client, a lock, loaded weights: rebuilt by the model
                continue
            self.fields[name] = value

    def build(self) -> Any:
        return self.cls(**self.fields)


def _judge_recipe(model: Any, dumps: Callable[[Any], bytes]) -> Any:
    """What the driver ships for ``model``: a string, None and a factory as they are; a chat model pickled when it
    can be, else as a ``_Rebuild``."""
    from langchain_core.language_models import BaseChatModel  # noqa: PLC0415

    if not isinstance(model, BaseChatModel):
        return model
    try:
        dumps(model)
        return model
    except Exception:  # noqa: BLE001 - clients and locks do not pickle
        return _Rebuild(model, dumps)


def _build_judge(spec: Any) -> Any:
    """The judge an actor scores with, built once: a spec string ("fake", "local", "openai:...", "@calib.json"),
    None (resolved from the environment, as ``resolve_model(None)``), a chat model (shipped pickled, or rebuilt from
    its class and given fields), or a function of no arguments that returns one (called here, in the actor)."""
    if isinstance(spec, _Rebuild):
        return spec.build()
    if isinstance(spec, str) and spec.strip().lower() == "fake":
        from ..testing import FakeJudge  # noqa: PLC0415

        return FakeJudge()
    from langchain_core.language_models import BaseChatModel  # noqa: PLC0415

    if callable(spec) and not isinstance(spec, BaseChatModel):
        spec = spec()
    from ..judges import resolve_model  # noqa: PLC0415

    return resolve_model(spec)


def _store_judged(store: Any, judge: Any) -> Any:
    """``judge`` calibrated on ``store``'s labels (``store_calibrated``) when it is the bare embedded judge and the
    store holds labels; as it is otherwise, or when the labels cannot be read (said in the log)."""
    from ._store_calibration import store_calibrated  # noqa: PLC0415

    try:
        return store_calibrated(store, judge)[0]
    except Exception as exc:  # noqa: BLE001 - scoring goes on with the judge as given
        logger.warning("contextjudge: the store's calibration could not be applied (%s); the judge is used as given.",
                       exc)
        return judge


class _ScoringActor:
    """One Ray actor: its judge and metrics built once, the store opened once; ``run`` is one ``Worker`` pass."""

    def __init__(self, store_url: str, judge: Any, metrics: Sequence[Any] | None, settings: dict[str, Any]) -> None:
        self.core = _pin_one_core() if settings.get("pin", True) else None
        try:
            from threadpoolctl import threadpool_limits  # noqa: PLC0415

            self._blas = threadpool_limits(limits=1)  # kept: the limit holds while the object lives
        except Exception:  # noqa: BLE001 - not installed, or no BLAS loaded yet
            self._blas = None
        from ..store import open_store  # noqa: PLC0415

        self.store = open_store(store_url)
        # the embedded judge calibrated on the store's labels, as eval and score use it (the driver fitted it once
        # and kept it in the store: store_calibrated finds it there)
        self.judge = _store_judged(self.store, _build_judge(judge))
        self.metrics = list(metrics) if metrics is not None else None
        self.settings = settings

    def info(self) -> dict[str, Any]:
        import socket  # noqa: PLC0415

        return {"pid": os.getpid(), "host": socket.gethostname(), "core": self.core}

    def run(self, run_id: str | None) -> dict[str, int]:
        from ._worker import Worker  # noqa: PLC0415

        s = self.settings
        worker = Worker(self.store, self.metrics, self.judge, run_id=run_id, lease=s["lease"], batch=s["batch"],
                        concurrency=s["concurrency"], judge_options=s.get("judge_options"), poll=s["poll"],
                        cpus=0, nice=0, grace=s["grace"], max_attempts=s["max_attempts"], exclusive=False,
                        report_every=10 ** 9, recalibrate_every=None)  # the driver's judge, as it was given
        return worker.run(once=True).to_dict()


# ---------------------------------------------------------------------------------------------------- the driver
@dataclass
class RayScore:
    """What a Ray scoring pass did: the run, the summed worker counts, the actors (started, lost), the rounds (a
    round starts the actors' claim loops; another follows while cases remain claimable, e.g. a dead actor's
    expired leases), the final queue counts of the run, seconds, and whether the queue was drained (``complete``:
    False when the judge was down or the budget set cases aside)."""

    run_id: str
    counts: dict[str, int] = field(default_factory=dict)
    workers: int = 0
    actors_started: int = 0
    actors_lost: int = 0
    rounds: int = 0
    queue: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    complete: bool = False
    stopped_because: str | None = None

    def line(self) -> str:
        """One line for the terminal: cases judged, workers, seconds, rounds, lost actors and the queue."""
        c = self.counts
        lost = f", {self.actors_lost} actor(s) lost and replaced" if self.actors_lost else ""
        return (f"ray: run {self.run_id}: {c.get('judged', 0)} case(s) judged by {self.workers} worker(s) in "
                f"{self.seconds:.1f}s ({self.rounds} round(s){lost}); queue {self.queue}")


def _store_url(store: ResultsStore, address: str | None) -> str:
    """A URL of ``store`` that an actor can open (an absolute path for SQLite)."""
    if not getattr(store, "is_sqlite", False):
        return store.engine.url.render_as_string(hide_password=False)
    path = store.engine.url.database
    if not path or path == ":memory:":
        raise ConfigurationError("engine='ray' needs a store the actors can open: an in-memory SQLite store is only "
                                 "this process's. Pass a file path, or PostgreSQL for a cluster.")
    if address:
        logger.warning("contextjudge: a SQLite store (%s) with a Ray cluster: every node must see this file (a shared "
                       "filesystem), and SQLite takes one writer at a time. PostgreSQL is the store for clusters.",
                       path)
    return os.path.abspath(path)


def _forwarded_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_ENV)}
    env.update(_ONE_THREAD)
    env.update(extra or {})
    return env


def _strip(metrics: Sequence[Any] | None) -> list[Any] | None:
    """Copies of the metrics without their judge (the actor's judge is the run's default) or last results."""
    if metrics is None:
        return None
    out = []
    for m in metrics:
        c = copy.copy(m)
        for attr in ("_model_arg", "_model", "last_result"):
            if hasattr(c, attr):
                setattr(c, attr, None)
        out.append(c)
    return out


class RayEngine:
    """Start (or join) Ray, run ``workers`` scoring actors against a store, and wait for them.

    ``address``: a cluster to join (``ray://host:10001`` or ``host:6379``; None starts a local instance with
    ``workers`` CPUs, or uses the one this process already started). ``model``: see ``_build_judge``. ``metrics``:
    metric objects (shipped to the actors without their judge; a class the actors cannot import fails with a
    clear message), or None for each run's own metrics. ``lease``/``batch``/``concurrency``/``poll``/``grace``/
    ``max_attempts``: the ``Worker``'s. ``env``: extra environment variables for the actors (the driver's
    ``OPENAI_*``, ``CONTEXTJUDGE_*`` and a few other providers' keys are forwarded). ``log``: progress lines.
    ``pids``: the process ids of the live actors (for operators and tests)."""

    def __init__(self, store: ResultsStore | str | os.PathLike[str], *, model: Any = None,
                 metrics: Sequence[Any] | None = None,
                 address: str | None = None, workers: int | None = None, judge_options: Any = None,
                 lease: float = 60.0, batch: int = 8, concurrency: int = 4, poll: float = 0.5, grace: float = 10.0,
                 max_attempts: int = 5, env: dict[str, str] | None = None, pin: bool = True,
                 log: Callable[[str], None] | None = None, report_every: float = 10.0) -> None:
        if workers is not None and int(workers) < 1:
            raise ConfigurationError(f"engine='ray': workers must be 1 or more, got {workers!r}.")
        if isinstance(store, (str, os.PathLike)):
            from ..store import open_store  # noqa: PLC0415

            store = open_store(store)
        self.store = store
        self.model = model
        self.metrics = _strip(metrics)
        self.address = address
        self.workers = None if workers is None else int(workers)
        self.settings = {"lease": float(lease), "batch": int(batch), "concurrency": int(concurrency),
                         "poll": float(poll), "grace": float(grace), "max_attempts": int(max_attempts),
                         "judge_options": judge_options, "pin": bool(pin)}
        self.env = env
        self.log = log or (lambda text: logger.info("contextjudge: %s", text))
        self.report_every = float(report_every)
        self.pids: dict[int, int] = {}  # actor number -> pid
        self.actors_ready = threading.Event()  # set once the first actors answered (their pids are known)
        self._ray: Any = None
        self._started_ray = False
        self._recipe: tuple[Any] | None = None

    # ------------------------------------------------------------------------------------------ Ray itself
    def _connect(self) -> int:
        """Start or join Ray; return the number of workers to run."""
        ray = self._ray = require_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not ray.is_initialized():
            kw: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
            if self.address:
                ray.init(address=self.address, **kw)
            else:
                from ._worker import usable_cores  # noqa: PLC0415

                ray.init(num_cpus=self.workers or len(usable_cores()), include_dashboard=False, **kw)
            self._started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 0)) or 1
        n = self.workers or cpus
        if n > cpus:
            logger.warning("contextjudge: %d Ray worker(s) asked for, but the cluster has %d CPU(s); each worker takes "
                           "one: running %d.", n, cpus, cpus)
            n = cpus
        return n

    def _disconnect(self) -> None:
        if self._started_ray and self._ray is not None:
            self._ray.shutdown()
            self._started_ray = False

    def _fit_store_calibration(self) -> None:
        """With labels in the store and the embedded judge, fit its calibration on them once here and keep it in the
        store, so every actor finds it there rather than fitting it again."""
        if not callable(getattr(self.store, "labelled_cases", None)):
            return
        from langchain_core.language_models import BaseChatModel  # noqa: PLC0415

        from .._result import is_embedded_judge  # noqa: PLC0415
        from ..judges import judge_name, local_spec  # noqa: PLC0415

        model = self.model
        if isinstance(model, str):
            embedded = local_spec(model) is not None
        elif isinstance(model, BaseChatModel):
            embedded = is_embedded_judge(judge_name(model))
        else:  # None or a factory: each actor resolves it, and fits when it is the embedded judge
            embedded = False
        if embedded:
            _store_judged(self.store, _build_judge(model))

    def _new_actor(self, url: str, number: int) -> Any:
        ray = self._ray
        cls = ray.remote(_ScoringActor).options(
            num_cpus=1, max_concurrency=2, max_restarts=0, name=None,
            runtime_env={"env_vars": _forwarded_env(self.env)})
        if self._recipe is None:
            self._recipe = (_judge_recipe(self.model, ray.cloudpickle.dumps),)
        return cls.remote(url, self._recipe[0], self.metrics, self.settings)

    def _actor_info(self, actor: Any, number: int) -> None:
        ray = self._ray
        try:
            info = ray.get(actor.info.remote())
        except ray.exceptions.RayActorError as exc:
            raise ConfigurationError(_actor_failure(exc)) from exc
        except ray.exceptions.RayError as exc:  # pragma: no cover - e.g. a runtime env that cannot be set up
            raise ConfigurationError(f"engine='ray': a scoring actor could not start: {exc}") from exc
        self.pids[number] = info["pid"]

    # ------------------------------------------------------------------------------------------ one pass
    def score(self, run_id: str) -> RayScore:
        """Score the queued cases of ``run_id`` (enqueue them first: ``store.enqueue``) until none is left to claim;
        returns what happened. Ends neither the run nor Ray when Ray was already running."""
        t0 = time.perf_counter()
        url = _store_url(self.store, self.address)
        self._fit_store_calibration()
        n = self._connect()
        out = RayScore(run_id=run_id, workers=n)
        ray = self._ray
        actors: dict[int, Any] = {}
        try:
            for i in range(n):
                actors[i] = self._new_actor(url, i)
            for i, a in actors.items():
                self._actor_info(a, i)
            out.actors_started = n
            self.actors_ready.set()
            self.log(f"ray: {n} scoring worker(s) on {'cluster ' + self.address if self.address else 'a local Ray'}"
                     f" (pids {', '.join(str(p) for p in self.pids.values())}); run {run_id}")
            totals: dict[str, int] = {}
            next_number = n
            last_report = time.monotonic()
            while True:
                out.rounds += 1
                pending = {actors[i].run.remote(run_id): i for i in actors}
                round_counts: dict[str, int] = {}
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                    for ref in ready:
                        i = pending.pop(ref)
                        try:
                            got = ray.get(ref)
                        except ray.exceptions.RayActorError as exc:
                            out.actors_lost += 1
                            self.pids.pop(i, None)
                            if out.actors_lost > 3 * n + 3:
                                raise ConfigurationError(_actor_failure(exc, repeated=True)) from exc
                            self.log(f"ray: worker {i} died ({type(exc).__name__}); its cases return to the queue "
                                     f"when their {self.settings['lease']:g}s leases expire; starting another")
                            del actors[i]
                            actors[next_number] = self._new_actor(url, next_number)
                            self._actor_info(actors[next_number], next_number)
                            out.actors_started += 1
                            next_number += 1
                            continue
                        for k, v in got.items():
                            round_counts[k] = round_counts.get(k, 0) + v
                    if time.monotonic() - last_report >= self.report_every:
                        last_report = time.monotonic()
                        q = self.store.queue_counts(run_id)
                        self.log(f"ray: run {run_id}: {q['done']} done, {q['queued'] + q['expired']} queued, "
                                 f"{q['claimed']} being scored, {q['skipped']} set aside")
                for k, v in round_counts.items():
                    totals[k] = totals.get(k, 0) + v
                q = self.store.queue_counts(run_id)
                if q["queued"] == 0 and q["claimed"] == 0 and q["expired"] == 0:
                    out.complete = True
                    break
                if round_counts.get("judge_down") and not round_counts.get("judged"):
                    out.stopped_because = ("the judge is unavailable: the cases were given back to the queue; run "
                                           "again when it answers")
                    break
                if q["queued"] == 0 and q["expired"] == 0:
                    # only cases held by a dead actor, whose leases have not expired yet: wait for them
                    self._wait_claimable(run_id)
            out.counts = totals
            out.queue = self.store.queue_counts(run_id)
            out.seconds = time.perf_counter() - t0
            return out
        finally:
            for a in actors.values():
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001, S110 - already gone
                    pass
            self.pids.clear()
            self._disconnect()

    def _wait_claimable(self, run_id: str) -> None:
        deadline = time.monotonic() + self.settings["lease"] + 5.0
        while time.monotonic() < deadline:
            q = self.store.queue_counts(run_id)
            if q["queued"] or q["expired"] or not q["claimed"]:
                return
            time.sleep(0.2)


def _actor_failure(exc: BaseException, repeated: bool = False) -> str:
    text = str(exc)
    if "ModuleNotFoundError" in text or "No module named" in text or "AttributeError: Can't get attribute" in text:
        return ("engine='ray': a scoring actor could not load the metrics or the judge: their classes must be "
                "importable on every Ray worker (install your package there, or pass it with Ray's runtime_env). "
                f"Ray said: {text[-600:]}")
    if repeated:
        return f"engine='ray': the scoring actors keep dying; stopping. The last one: {text[-600:]}"
    return f"engine='ray': a scoring actor failed to start: {text[-600:]}"


# ---------------------------------------------------------------------------------------------------- run helpers
def copy_run(store: ResultsStore, run_id: str, config: dict[str, Any], *, name: str | None = None,
             chunk: int = 500) -> str:
    """A new run holding ``run_id``'s cases (same keys, positions and nodes; no results), each queued: what a
    re-score with another judge or template scores. Returns the new run's id."""
    old = store.run_info(run_id)
    new_cfg = {**config, "name": name or f"{old.name or run_id} rescore", "rescore_of": run_id}
    new_id = store.begin_run(None, new_cfg)
    cases = store.load_cases(run_id)
    for start in range(0, len(cases), chunk):
        store.save_cases_queued(new_id, [(c.case_key, c.position, c.test_case)
                                         for c in cases[start:start + chunk]], enqueue=True)
    return new_id


def score_run(store: ResultsStore, run_id: str, **kw: Any) -> RayScore:
    """Queue ``run_id``'s unscored cases and score them on Ray (``RayEngine`` keywords)."""
    added = store.enqueue(run_id, only_unscored=True)
    logger.debug("contextjudge: queued %d case(s) of run %s", added, run_id)
    return RayEngine(store, **kw).score(run_id)


def finish_run(store: ResultsStore, run_id: str, report: RayScore, keys: Sequence[str], cases: Sequence[Any] | None = None, *,
               seconds: float, explain_empty: bool = False) -> Any:
    """After a Ray pass: the results of ``keys`` (in that order) read back from the store as an ``EvaluationResult``
    (with ``cases``, the caller's own test case objects stand in the results), and the run ended with its summary
    (``finished``, or ``interrupted`` when cases are left). ``explain_empty``: a case no metric scored gets
    ``NO_METRIC_APPLIES`` as its error, as the local engine gives it."""
    from .._result import EvaluationResult, TestResult  # noqa: PLC0415
    from ._score import NO_METRIC_APPLIES  # noqa: PLC0415

    loaded = store.load_run(run_id)
    by_key = {sc.case_key: tr for sc, tr in zip(store.load_cases(run_id), loaded.test_results, strict=False)}
    trs: list[TestResult] = []
    for i, key in enumerate(keys):
        got = by_key.get(key)
        if cases is not None:
            tc = cases[i]
        elif got is not None:
            tc = got.test_case
        else:
            continue
        tr = TestResult(index=len(trs) if cases is None else i, name=getattr(tc, "name", None), test_case=tc,
                        metrics_data=list(got.metrics_data) if got is not None else [],
                        error=None if cases is not None or got is None else got.error)
        if explain_empty and got is not None and not tr.metrics_data:
            tr.error = NO_METRIC_APPLIES
        trs.append(tr)
    result = EvaluationResult(test_results=trs, usage=loaded.usage, run_id=run_id, duration_seconds=seconds)
    errored = sum(bool(tr.error or any(m.error for m in tr.metrics_data)) for tr in trs)
    store.end_run(run_id, {"summary": result.summary(), "usage": result.usage.to_dict(),
                           "duration_seconds": seconds, "judges": result.judges(), "cases_with_errors": errored,
                           "ray": {"workers": report.workers, "rounds": report.rounds,
                                   "actors_lost": report.actors_lost}},
                  status="finished" if report.complete else "interrupted")
    return result


def evaluate_on_ray(cases: Sequence[Any], metrics: Sequence[Any], *, model: Any = None,
                    store: ResultsStore | str | os.PathLike[str] | None = None,
                    run_id: str | None = None, run_name: str | None = None, run_config: dict[str, Any] | None = None,
                    case_keys: Sequence[str] | None = None, ray_address: str | None = None,
                    workers: int | None = None, judge_options: Any = None, **engine_kw: Any) -> Any:
    """``evaluate(..., engine="ray")``: the cases written to ``store`` (a temporary SQLite file when None) under a
    run, scored by Ray actors, read back as an ``EvaluationResult`` in the cases' order."""
    from .._version import __version__  # noqa: PLC0415
    from ..cases.identity import case_key  # noqa: PLC0415
    from ._run import metric_config  # noqa: PLC0415

    require_ray()
    cases = list(cases)
    metrics = list(metrics)
    if model is None:
        model = _common_model(metrics)
    tmp = None
    if store is None:
        if ray_address:
            raise ConfigurationError("evaluate(engine='ray', ray_address=...) needs store=: a PostgreSQL URL every "
                                     "node of the cluster can reach (the default temporary SQLite file is local).")
        tmp = tempfile.TemporaryDirectory(prefix="contextjudge-ray-")
        store = os.path.join(tmp.name, "results.db")
    from ..store import open_store  # noqa: PLC0415

    owns_store = not hasattr(store, "claim")
    st = open_store(store)
    t0 = time.perf_counter()
    try:
        keys = [case_key(i, tc) if case_keys is None else case_keys[i] for i, tc in enumerate(cases)]
        if len(set(keys)) != len(keys):
            raise ConfigurationError("evaluate(engine='ray'): two test cases have the same key (the same id, or "
                                     "case_keys repeats one); each case needs its own.")
        config = {**(run_config or {}), "name": run_name, "metrics": [metric_config(m) for m in metrics],
                  "judges": [{"name": _judge_label(model)}], "contextjudge": __version__, "cases": len(cases),
                  "engine": "ray"}
        rid = st.begin_run(run_id, config)
        for start in range(0, len(cases), 500):
            st.save_cases_queued(rid, [(keys[i], i, cases[i]) for i in range(start, min(len(cases), start + 500))])
        st.enqueue(rid, only_unscored=True)  # a resumed run: its cases without results, queued again
        report = RayEngine(st, model=model, metrics=metrics, address=ray_address, workers=workers,
                           judge_options=judge_options, **engine_kw).score(rid)
        result = finish_run(st, rid, report, keys, cases, seconds=time.perf_counter() - t0, explain_empty=True)
        if not report.complete:
            logger.warning("contextjudge: engine='ray' stopped before every case was scored (%s); run again with "
                           "run_id=%r to finish", report.stopped_because or report.queue, rid)
        return result
    finally:
        if owns_store:
            st.close()
        if tmp is not None:
            tmp.cleanup()


def _common_model(metrics: Sequence[Any]) -> Any:
    """The one judge the metrics were built with (None when none was): the Ray actors score every metric with one
    judge."""
    own = [getattr(m, "_model_arg", None) for m in metrics]
    given = [x for x in own if x is not None]
    if not given:
        return None
    first = given[0]
    if any(x is not first and x != first for x in given) or len(given) != len(own):
        raise ConfigurationError("evaluate(engine='ray') scores every metric with one judge, and these metrics were "
                                 "built with different ones: pass model=... to evaluate instead.")
    return first


def _judge_label(model: Any) -> str:
    if model is None or isinstance(model, str):
        return str(model or "default")
    try:
        from ..judges import judge_name  # noqa: PLC0415

        return judge_name(model)
    except Exception:  # noqa: BLE001 - a factory, or a model that cannot tell its name
        return getattr(model, "__name__", type(model).__name__)

