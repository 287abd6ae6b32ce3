# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/ (NonLLMContextRecall)
from contextjudge.compat.ragas.dataset_schema import SingleTurnSample
from contextjudge.compat.ragas.metrics import NonLLMContextRecall

sample = SingleTurnSample(
    retrieved_contexts=["Amsterdam is the capital of the Netherlands."],
    reference_contexts=["Amsterdam is the capital of the Netherlands.", "The Rijksmuseum is in Amsterdam."]
)

context_recall = NonLLMContextRecall()
await context_recall.single_turn_ascore(sample)
