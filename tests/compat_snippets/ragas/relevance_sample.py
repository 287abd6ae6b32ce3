# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/ (ContextRelevance with SingleTurnSample)
from contextjudge.compat.ragas.dataset_schema import SingleTurnSample
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import ContextRelevance

evaluator_llm = LangchainLLMWrapper("local")

sample = SingleTurnSample(
    user_input="When and where was Marie Curie born?",
    retrieved_contexts=[
        "Marie Curie was born on 7 November 1867.",
        "Marie Curie was born in Warsaw, in Poland.",
    ]
)

scorer = ContextRelevance(llm=evaluator_llm)
score = await scorer.single_turn_ascore(sample)
print(score)
