# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/ (ContextRelevance, ragas.metrics.collections)
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextRelevance

client = AsyncOpenAI()
llm = llm_factory("local", client=client)

scorer = ContextRelevance(llm=llm)

result = await scorer.ascore(
    user_input="When and where was Marie Curie born?",
    retrieved_contexts=[
        "Marie Curie was born on 7 November 1867.",
        "Marie Curie was born in Warsaw, in Poland.",
    ]
)
print(f"Context Relevance Score: {result.value}")
