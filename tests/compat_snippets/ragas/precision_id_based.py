# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (IDBasedContextPrecision)
from contextjudge.compat.ragas import SingleTurnSample
from contextjudge.compat.ragas.metrics import IDBasedContextPrecision

sample = SingleTurnSample(
    retrieved_context_ids=["d1", "d2", "d3", "d4"],
    reference_context_ids=["d1", "d4", "d5", "d6"]
)

id_precision = IDBasedContextPrecision()
await id_precision.single_turn_ascore(sample)
