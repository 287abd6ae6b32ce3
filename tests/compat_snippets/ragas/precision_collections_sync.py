# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_precision/ (the sync form: scorer.score(...); continues the ContextPrecision block)
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextPrecision

client = AsyncOpenAI()
llm = llm_factory("local", client=client)
scorer = ContextPrecision(llm=llm)

result = scorer.score(
        user_input="Where is the Rijksmuseum?",
        reference="The Rijksmuseum is in Amsterdam.",
        retrieved_contexts=["The Rijksmuseum is a museum in Amsterdam.", "The Louvre is a museum in Paris."]
    )
print(result.value, result.reason)
