# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/faithfulness/ (Faithfulness,
# ragas.metrics.collections); llm_factory's model -> "local"
from openai import AsyncOpenAI
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import Faithfulness

client = AsyncOpenAI()
llm = llm_factory("local", client=client)

scorer = Faithfulness(llm=llm)
result = await scorer.ascore(
    user_input="Where and when was Einstein born?",
    response="Einstein was born in Germany on 14th March 1879.",
    retrieved_contexts=[
        "Albert Einstein (born 14 March 1879) was a German-born theoretical physicist, widely held to be one of the greatest and most influential scientists of all time."
    ]
)
print(f"Faithfulness Score: {result.value}")
