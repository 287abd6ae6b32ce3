# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/context_recall/ (the sync form: scorer.score(...))
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import ContextRecall

client = AsyncOpenAI()
llm = llm_factory("local", client=client)
scorer = ContextRecall(llm=llm)

result = scorer.score(
        user_input="Where is the Rijksmuseum?",
        retrieved_contexts=["Amsterdam is the capital of the Netherlands."],
        reference="The Rijksmuseum is in Amsterdam."
    )
print(result.value)
