# peer: deepeval
# source: https://deepeval.com/docs/evaluation-datasets (add_golden, save_as, add_goldens_from_json_file /
# _jsonl_file / _csv_file, add_test_cases_from_json_file, evaluate(dataset.test_cases))
import json

from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.dataset import EvaluationDataset, Golden
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric

with open("example.json", "w") as f:
    json.dump([{"query": "How long do loans last?", "expected_output": "Three weeks."}], f)
with open("example.jsonl", "w") as f:
    f.write(json.dumps({"input": "What do late returns cost?", "expected_output": "20 cents a day."}) + "\n")
with open("example.csv", "w") as f:
    f.write("input,expected_output,context\nWhen does the cafe open?,At nine.,The cafe opens at nine.|Daily\n")
with open("cases.json", "w") as f:
    json.dump([{"query": "How long do loans last?", "actual_output": "Three weeks.", "expected_output": "Three weeks.",
                "retrieval_context": ["Loans last three weeks.", "The cafe opens at nine."]}], f)

dataset = EvaluationDataset(goldens=[Golden(input="Can I renew a loan?")])
dataset.add_golden(Golden(input="Thanks!"))
dataset.add_goldens_from_json_file(file_path="example.json", input_key_name="query")
dataset.add_goldens_from_jsonl_file(file_path="example.jsonl")
dataset.add_goldens_from_csv_file(file_path="example.csv", context_col_delimiter="|")
print(len(dataset.goldens), dataset.goldens[-1].context)
dataset.save_as(file_type="json", directory="./deepeval-test-dataset")

cases = EvaluationDataset()
cases.add_test_cases_from_json_file(
    file_path="cases.json",
    input_key_name="query",
    actual_output_key_name="actual_output",
    expected_output_key_name="expected_output",
    retrieval_context_key_name="retrieval_context",
)
evaluate(test_cases=cases.test_cases, metrics=[ContextualPrecisionMetric(model="local")])
