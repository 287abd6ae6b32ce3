"""The answer schemas sent to judges for structured output (the one set; the parser reads any answer leniently)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._result import Usage

__all__ = ['Answer', 'Rubric', 'SupportVerdicts', 'Verdicts']

logger = logging.getLogger("contextjudge")


@dataclass
class Answer:
    """A judge's usable answer: verdicts by id (or a rubric score), with what it cost."""

    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    score: float | None = None
    reason: str = ""
    usage: Usage = field(default_factory=Usage)
    method: str | None = None

    def to_cache(self) -> dict[str, Any]:
        """The parts of the answer a verdict cache keeps (no usage: a cached answer costs nothing)."""
        return {"verdicts": self.verdicts, "score": self.score, "reason": self.reason}


# The answer schemas sent for structured output. They are deliberately bare (no descriptions, no optional
# fields a task does not use): the prompt already explains every field, and a provider bills the schema as prompt
# tokens on every call. Every field is required, because LangChain sends pydantic schemas with "strict": true and
# OpenAI's strict mode rejects a schema whose properties are not all required (an HTTP 400 on every first call).
# The parser reads any answer leniently anyway; these only steer the judge.
# No docstrings: a model's docstring becomes the schema's (billed) description.
def _strict_schema(schema: dict[str, Any]) -> None:
    """Every property required, no defaults: what strict structured output accepts, at the fewest tokens."""
    props = schema.get("properties") or {}
    for prop in props.values():
        prop.pop("default", None)
        prop.pop("title", None)
    schema["required"] = list(props)


# Validation stays lenient (defaults, free-form verdict words) because a judge's near-miss answer is still
# worth reading; the schema sent to the judge is strict and steers it to "yes"/"no".
class _Verdict(BaseModel):
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    id: str
    verdict: str = Field(json_schema_extra={"enum": ["yes", "no"]})
    reason: str = ""


class _SupportVerdict(_Verdict):
    node_ids: list[str] = Field(default_factory=list)


class Verdicts(BaseModel):  # noqa: D101 - a docstring would become the schema's billed description
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    verdicts: list[_Verdict]


class SupportVerdicts(BaseModel):  # noqa: D101 - a docstring would become the schema's billed description
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    verdicts: list[_SupportVerdict]


class Rubric(BaseModel):  # noqa: D101 - a docstring would become the schema's billed description
    model_config = ConfigDict(json_schema_extra=_strict_schema)
    score: float
    reason: str = ""

