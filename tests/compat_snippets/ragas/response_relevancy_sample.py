# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/metrics/available_metrics/answer_relevance/ (ResponseRelevancy with
# SingleTurnSample, llm and embeddings wrappers, single_turn_ascore)
from langchain_openai import OpenAIEmbeddings
from contextjudge.compat.ragas import SingleTurnSample
from contextjudge.compat.ragas.embeddings import LangchainEmbeddingsWrapper
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import ResponseRelevancy

evaluator_llm = LangchainLLMWrapper("local")
evaluator_embeddings = LangchainEmbeddingsWrapper(OpenAIEmbeddings())

sample = SingleTurnSample(
    user_input="When was the first super bowl?",
    response="The first superbowl was held on Jan 15, 1967",
    retrieved_contexts=[
        "The First AFL-NFL World Championship Game was an American football game played on January 15, 1967, at the Los Angeles Memorial Coliseum in Los Angeles."
    ]
)

scorer = ResponseRelevancy(llm=evaluator_llm, embeddings=evaluator_embeddings)
await scorer.single_turn_ascore(sample)
