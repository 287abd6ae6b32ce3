# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (LLMContextPrecisionWithoutReference, SingleTurnSample); evaluator_llm is the
# page's LangchainLLMWrapper(ChatOpenAI(...)) with the judge -> "local"
from contextjudge.compat.ragas import SingleTurnSample
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithoutReference

evaluator_llm = LangchainLLMWrapper("local")
context_precision = LLMContextPrecisionWithoutReference(llm=evaluator_llm)

sample = SingleTurnSample(
    user_input="Where is the Rijksmuseum?",
    response="The Rijksmuseum is in Amsterdam.",
    retrieved_contexts=["The Rijksmuseum is a museum in Amsterdam."],
)

await context_precision.single_turn_ascore(sample)
