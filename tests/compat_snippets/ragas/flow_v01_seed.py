# peer: ragas
# source: https://docs.ragas.io/en/v0.1.21/concepts/metrics/context_utilization.html (Ragas 0.1: a dict of lists
# in datasets.Dataset, the context_utilization instance, evaluate(dataset, metrics=[...]))
from datasets import Dataset
from contextjudge.compat.ragas.metrics import context_utilization
from contextjudge.compat.ragas import evaluate

data_samples = {
    'question': ['When did the Berlin Wall fall?', 'Who painted the Night Watch?'],
    'answer': ['The Berlin Wall fell on 9 November 1989.', 'Rembrandt painted the Night Watch.'],
    'contexts': [['The Berlin Wall fell on 9 November 1989, opening the border.'],
                 ['The Night Watch is a 1642 painting by Rembrandt.', 'It hangs in the Rijksmuseum.']],
}
dataset = Dataset.from_dict(data_samples)
score = evaluate(dataset, metrics=[context_utilization], llm="local")
print(score.to_pandas())
