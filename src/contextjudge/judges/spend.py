"""Hard judge budgets: spend limits per time window, the price table, and the reservation of a call's estimated
tokens before it is sent.

    from contextjudge.judges.spend import Budget
    Budget(tokens_per_day=2_000_000, dollars_per_day=5.0)

CONTRACT (issue 17; the lead wrote the names, the budgets helper fills them in):

- ``Budget`` (frozen dataclass): ``tokens_per_hour``, ``tokens_per_day``, ``dollars_per_hour``, ``dollars_per_day``
  (None: no limit of that kind); windows are calendar hours/days in UTC. A dollar limit on a judge with no known
  price and no token limit is refused (``ConfigurationError``) before anything is judged.
- the price table ships in ``contextjudge/data/prices.json`` (dollars per million input/output tokens, by model
  name); ``register_prices({...})`` extends it; ``price_of(name)`` looks a judge up (None when unknown).
- ``BudgetLedger(budget, judge=..., price=..., store=None, clock=time.time)``: ``reserve(input_tokens,
  output_tokens)`` before a call (raises ``errors.BudgetExhaustedError`` when a limit has no room), ``settle(res,
  usage)`` after it, ``exhausted_until()`` for a cheap check before a case starts. With a store (``store/_spend.py``)
  the windows are shared by every process that uses it.
- ``JudgeOptions.budget`` carries a ``Budget`` into every run; the judge client reserves and settles per call.
"""
