# peer: deepeval
# source: https://deepeval.com/docs/metrics-contextual-precision (Usage, multimodal); the page's block lacks a comma after actual_output and leaves
# MLLMImage(...) unfilled, so it does not run on DeepEval either: re-created with both filled in
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase, MLLMImage
from contextjudge.compat.deepeval import evaluate

retrieval_context = [
    f"The reading room {MLLMImage(url='https://example.org/reading-room.png')} was built in 1911.",
    f"It seats three hundred readers.",
]

metric = ContextualPrecisionMetric(
    threshold=0.7,
    model="local",
    include_reason=True
)
test_case = LLMTestCase(
    input=f"When was this room built? {MLLMImage(url='https://example.org/reading-room.png')}",
    actual_output=f"This is the reading room, built in 1911.",
    expected_output=f'The reading room was built in 1911.',
    retrieval_context=retrieval_context
)

evaluate(test_cases=[test_case], metrics=[metric])
