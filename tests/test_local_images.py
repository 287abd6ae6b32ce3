"""The embedded judge never sees pixels: it judges text and alt text around images, and says so."""

import importlib.util
import sys
from pathlib import Path

from contextjudge import LLMTestCase, MLLMImage, RetrievedNode
from contextjudge.judges._local import LocalJudge
from contextjudge.metrics import ContextualPrecisionMetric

_spec = importlib.util.spec_from_file_location("_tlj", Path(__file__).with_name("test_local_judge.py"))
_tlj = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_tlj", _tlj)
_spec.loader.exec_module(_tlj)


def test_local_judge_uses_alt_text_and_says_so():
    judge = LocalJudge(embeddings=_tlj.BagOfWords())
    tower = MLLMImage(url="https://example.com/eiffel.jpg", alt="the Eiffel Tower in Paris at night")
    bare = MLLMImage(url="https://example.com/unknown.jpg")
    case = LLMTestCase(
        input="How tall is the Eiffel Tower in Paris?",
        expected_output="The Eiffel Tower in Paris is 330 metres tall.",
        retrieval_context=["The Eiffel Tower in Paris is 330 metres tall.",
                           RetrievedNode("", images=[bare]),
                           RetrievedNode("Photo:", images=[tower])],
    )
    m = ContextualPrecisionMetric(model=judge)
    m.measure(case)  # no error: the local judge accepts images
    by_rank = {v["rank"]: v for v in m.verdicts}
    assert by_rank[2]["verdict"] == "no" and "no alt text" in by_rank[2]["reason"]
    assert "alt text" in by_rank[3]["reason"] and "Eiffel Tower" in by_rank[3]["reason"]
