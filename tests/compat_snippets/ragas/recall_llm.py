# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/ (LLMContextRecall, ragas.dataset_schema.SingleTurnSample)
from contextjudge.compat.ragas.dataset_schema import SingleTurnSample
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import LLMContextRecall

evaluator_llm = LangchainLLMWrapper("local")

sample = SingleTurnSample(
    user_input="Where is the Rijksmuseum?",
    response="The Rijksmuseum is in Amsterdam.",
    reference="The Rijksmuseum is in Amsterdam.",
    retrieved_contexts=["Amsterdam is the capital of the Netherlands."],
)

context_recall = LLMContextRecall(llm=evaluator_llm)
await context_recall.single_turn_ascore(sample)
