# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/nvidia_metrics/ (ContextRelevance, the sync form)
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextRelevance

client = AsyncOpenAI()
llm = llm_factory("local", client=client)
scorer = ContextRelevance(llm=llm)

result = scorer.score(
        user_input="When and where was Marie Curie born?",
        retrieved_contexts=["Marie Curie was born on 7 November 1867.", "Marie Curie was born in Warsaw, in Poland."]
    )
print(result.value)
