# peer: ragas
# source: https://docs.ragas.io/en/v0.1.21/getstarted/evaluation.html (Dataset.from_dict with question / answer /
# contexts / ground_truth, evaluate(dataset, metrics=[faithfulness, answer_relevancy, context_precision,
# context_recall]), score.to_pandas()); the judge is CONTEXTJUDGE_MODEL (local)
from datasets import Dataset
from contextjudge.compat.ragas import evaluate
from contextjudge.compat.ragas.metrics import faithfulness, answer_relevancy, context_precision, context_recall

data_samples = {
    'question': ['Where is the Rijksmuseum?', 'Who wrote Middlemarch?'],
    'answer': ['The Rijksmuseum is in Amsterdam.', 'Middlemarch was written by George Eliot.'],
    'contexts': [['The Rijksmuseum is a museum in Amsterdam.', 'The Louvre is a museum in Paris.'],
                 ['Middlemarch is a novel by George Eliot.', 'George Eliot was born in 1819.']],
    'ground_truth': ['The Rijksmuseum is in Amsterdam.', 'George Eliot wrote Middlemarch.']
}
dataset = Dataset.from_dict(data_samples)

score = evaluate(dataset, metrics=[faithfulness, answer_relevancy, context_precision, context_recall])
print(score)
print(score.to_pandas())
