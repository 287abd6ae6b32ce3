# peer: ragas
# source: https://docs.ragas.io/en/stable/getstarted/rag_eval/ (evaluate(dataset=, metrics=[LLMContextRecall(),
# Faithfulness(), FactualCorrectness()], llm=evaluator_llm)); llm -> "local"
from contextjudge.compat.ragas import EvaluationDataset, evaluate
from contextjudge.compat.ragas.llms import LangchainLLMWrapper
from contextjudge.compat.ragas.metrics import LLMContextRecall, Faithfulness, FactualCorrectness

dataset = [
    {"user_input": "Where is the Rijksmuseum?", "retrieved_contexts": ["The Rijksmuseum is a museum in Amsterdam."],
     "response": "The Rijksmuseum is in Amsterdam.", "reference": "The Rijksmuseum is in Amsterdam."},
]
evaluation_dataset = EvaluationDataset.from_list(dataset)
evaluator_llm = LangchainLLMWrapper("local")

result = evaluate(dataset=evaluation_dataset, metrics=[LLMContextRecall(), Faithfulness(), FactualCorrectness()],
                  llm=evaluator_llm)
print(result)
