# peer: ragas
# source: https://docs.ragas.io/en/stable/getstarted/rag_eval/ (list of dicts -> EvaluationDataset.from_list ->
# evaluate(dataset=, metrics=, llm=LangchainLLMWrapper(llm))) with the context metrics; llm -> "local"
from contextjudge.compat.ragas import EvaluationDataset, evaluate
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import LLMContextPrecisionWithReference, LLMContextRecall

DOCS = ["The Rijksmuseum is a museum in Amsterdam.", "The Louvre is a museum in Paris.",
        "Amsterdam is the capital of the Netherlands."]
sample_queries = ["Where is the Rijksmuseum?", "Where is the Louvre?"]
expected_responses = ["The Rijksmuseum is in Amsterdam.", "The Louvre is in Paris."]


def get_most_relevant_docs(query):
    words = set(query.lower().strip("?").split())
    return sorted(DOCS, key=lambda d: -len(words & set(d.lower().strip(".").split())))[:2]


dataset = []
for query, reference in zip(sample_queries, expected_responses):
    relevant_docs = get_most_relevant_docs(query)
    response = relevant_docs[0]
    dataset.append(
        {
            "user_input": query,
            "retrieved_contexts": relevant_docs,
            "response": response,
            "reference": reference,
        }
    )

evaluation_dataset = EvaluationDataset.from_list(dataset)

llm = "local"
evaluator_llm = LangchainLLMWrapper(llm)

result = evaluate(dataset=evaluation_dataset, metrics=[LLMContextRecall(), LLMContextPrecisionWithReference()],
                  llm=evaluator_llm)
print(result)
print(result.to_pandas())
