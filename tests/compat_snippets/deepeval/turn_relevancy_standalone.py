# peer: deepeval
# source: https://deepeval.com/docs/metrics-turn-contextual-relevancy (As a standalone; continues Usage); no model= on the page: the default
# judge (the embedded one here, with CONTEXTJUDGE_MODEL=local) scores it
from contextjudge.compat.deepeval.test_case import Turn, ConversationalTestCase
from contextjudge.compat.deepeval.metrics import TurnContextualRelevancyMetric
from contextjudge.compat.deepeval import evaluate

content = "You may keep a book for three weeks and renew it twice."
retrieval_context = [
    "Loans last three weeks; each loan can be renewed two times."
]

convo_test_case = ConversationalTestCase(
    turns=[
        Turn(role="user", content="How long can I borrow a book?"),
        Turn(role="assistant", content=content, retrieval_context=retrieval_context)
    ],
    expected_outcome="The assistant explains the loan period and the renewals.",
)

metric = TurnContextualRelevancyMetric(threshold=0.5)

# metric.measure(convo_test_case)
# print(metric.score, metric.reason)

metric.measure(convo_test_case)
print(metric.score, metric.reason)
