# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/ (IDBasedContextRecall)
from contextjudge.compat.ragas.dataset_schema import SingleTurnSample
from contextjudge.compat.ragas.metrics import IDBasedContextRecall

sample = SingleTurnSample(
    retrieved_context_ids=["d1", "d2", "d3"],
    reference_context_ids=["d1", "d4", "d5", "d6"]
)

id_recall = IDBasedContextRecall()
await id_recall.single_turn_ascore(sample)
