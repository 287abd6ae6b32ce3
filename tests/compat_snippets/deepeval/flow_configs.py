# peer: deepeval
# source: https://deepeval.com/docs/evaluation-flags-and-configs (AsyncConfig, DisplayConfig with results_folder,
# ErrorConfig, CacheConfig, hyperparameters, identifier) with a context metric
from contextjudge.compat.deepeval import evaluate
from contextjudge.compat.deepeval.evaluate import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig
from contextjudge.compat.deepeval.metrics import ContextualPrecisionMetric
from contextjudge.compat.deepeval.test_case import LLMTestCase

test_cases = [LLMTestCase(input="How long do loans last?", expected_output="Three weeks.",
                          retrieval_context=["Loans last three weeks.", "The cafe opens at nine."])]
metrics = [ContextualPrecisionMetric(model="local")]

for temp in [0.0, 0.4]:
    evaluate(
        test_cases=test_cases,
        metrics=metrics,
        hyperparameters={"model": "local", "temperature": temp},
        display_config=DisplayConfig(results_folder="./evals/prompt-v3", results_subfolder="test_runs"),
    )
evaluate(test_cases=test_cases, metrics=metrics, identifier="My Latest Test Run",
         async_config=AsyncConfig(), error_config=ErrorConfig(), cache_config=CacheConfig())
