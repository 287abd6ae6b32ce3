# peer: opik
# source: https://www.comet.com/docs/opik/evaluation/metrics/context_precision ("Asynchronous scoring is also
# supported with the ascore scoring method") for both metrics
import asyncio

from contextjudge.compat.opik.evaluation.metrics import ContextPrecision, ContextRecall


async def main():
    for metric in (ContextPrecision(model="local"), ContextRecall(model="local")):
        result = await metric.ascore(
            input="What is the capital of Italy?",
            output="Rome.",
            expected_output="Rome",
            context=["Italy's capital is Rome."],
        )
        print(result.name, result.value, result.reason)


asyncio.run(main())
