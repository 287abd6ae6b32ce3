# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (ContextUtilization, ragas.metrics.collections; the useful context ranked last)
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextUtilization

client = AsyncOpenAI()
llm = llm_factory("local", client=client)

scorer = ContextUtilization(llm=llm)

result = await scorer.ascore(
    user_input="Where is the Rijksmuseum?",
    response="The Rijksmuseum is in Amsterdam.",
    retrieved_contexts=[
        "The Louvre is a museum in Paris.",
        "The Rijksmuseum is a museum in Amsterdam."
    ]
)
print(f"Context Utilization Score: {result.value}")
