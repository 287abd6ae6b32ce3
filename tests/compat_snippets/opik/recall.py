# peer: opik
# source: https://www.comet.com/docs/opik/evaluation/metrics/context_recall (ContextRecall().score(...))
from contextjudge.compat.opik.evaluation.metrics import ContextRecall

metric = ContextRecall(model="local")

metric.score(
    input="What is the capital of Italy?",
    output="The capital of Italy is Rome. It is known for the Colosseum.",
    expected_output="Rome",
    context=["Italy is a country in Southern Europe. Its capital is Rome, home of the Colosseum."],
)
