# peer: ragas
# source: https://docs.ragas.io/en/stable/concepts/components/eval_dataset/ (SingleTurnSample x3,
# EvaluationDataset(samples=...), to_pandas) and evaluate with the context metrics
from contextjudge.compat.ragas import EvaluationDataset, SingleTurnSample, evaluate
from contextjudge.compat.ragas.metrics import ContextRelevance, LLMContextPrecisionWithoutReference

sample1 = SingleTurnSample(
    user_input="What is the capital of Italy?",
    retrieved_contexts=["Rome is the capital and largest city of Italy."],
    response="The capital of Italy is Rome.",
    reference="Rome",
)
sample2 = SingleTurnSample(
    user_input="Who wrote 'Middlemarch'?",
    retrieved_contexts=["'Middlemarch' is a novel by George Eliot."],
    response="'Middlemarch' was written by George Eliot.",
    reference="George Eliot",
)
sample3 = SingleTurnSample(
    user_input="What's the chemical formula for table salt?",
    retrieved_contexts=["Table salt is sodium chloride, NaCl."],
    response="Table salt is NaCl.",
    reference="NaCl",
)

dataset = EvaluationDataset(samples=[sample1, sample2, sample3])
print(dataset.to_pandas())
result = evaluate(dataset=dataset, metrics=[LLMContextPrecisionWithoutReference(), ContextRelevance()], llm="local")
print(result.scores)
