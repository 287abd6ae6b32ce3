# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (LLMContextPrecisionWithReference, SingleTurnSample)
from contextjudge.compat.ragas import SingleTurnSample
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference

evaluator_llm = LangchainLLMWrapper("local")
context_precision = LLMContextPrecisionWithReference(llm=evaluator_llm)

sample = SingleTurnSample(
    user_input="Where is the Rijksmuseum?",
    reference="The Rijksmuseum is in Amsterdam.",
    retrieved_contexts=["The Rijksmuseum is a museum in Amsterdam."],
)

await context_precision.single_turn_ascore(sample)
