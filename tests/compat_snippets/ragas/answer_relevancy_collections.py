# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/answer_relevance/ (AnswerRelevancy,
# ragas.metrics.collections, llm_factory and embedding_factory); the models -> "local"
from openai import AsyncOpenAI
from contextjudge.compat.ragas.embeddings import embedding_factory
from contextjudge.compat.ragas.llms import llm_factory
from contextjudge.compat.ragas.metrics.collections import AnswerRelevancy

client = AsyncOpenAI()
llm = llm_factory("local", client=client)
embeddings = embedding_factory("openai", model="text-embedding-3-small", client=client)

scorer = AnswerRelevancy(llm=llm, embeddings=embeddings)
result = await scorer.ascore(
    user_input="When was the first super bowl?",
    response="The first superbowl was held on Jan 15, 1967"
)
print(f"Answer Relevancy Score: {result.value}")
