# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (NonLLMContextPrecisionWithReference)
from contextjudge.compat.ragas import SingleTurnSample
from contextjudge.compat.ragas.metrics import NonLLMContextPrecisionWithReference

context_precision = NonLLMContextPrecisionWithReference()

sample = SingleTurnSample(
    retrieved_contexts=["The Rijksmuseum is a museum in Amsterdam."],
    reference_contexts=["Amsterdam is the capital of the Netherlands.", "The Rijksmuseum is in Amsterdam."]
)

await context_precision.single_turn_ascore(sample)
