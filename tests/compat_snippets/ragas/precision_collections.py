# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (ContextPrecision, ragas.metrics.collections); llm_factory's model -> "local"
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextPrecision

client = AsyncOpenAI()
llm = llm_factory("local", client=client)

scorer = ContextPrecision(llm=llm)

result = await scorer.ascore(
    user_input="Where is the Rijksmuseum?",
    reference="The Rijksmuseum is in Amsterdam.",
    retrieved_contexts=[
        "The Rijksmuseum is a museum in Amsterdam.",
        "The Louvre is a museum in Paris."
    ]
)
print(f"Context Precision Score: {result.value}")
