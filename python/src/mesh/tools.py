"""Cards as tool declarations for LLM APIs (OpenAI, Anthropic, Gemini), with the
arguments an LLM chose checked against the declared input before calling."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .cards import schemas
from .errors import InvalidArguments
from .schema import Schema, counted

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_GEMINI_DROPS = {
    "$schema",
    "$id",
    "additionalProperties",
    "$defs",
    "definitions",
    "default",
    "examples",
    "const",
    "patternProperties",
    "unevaluatedProperties",
}
OPEN_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    """A card as a tool: its name, description and input schema (``parameters``)."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def from_card(cls, card: dict[str, Any]) -> Tool:
        """The tool of a card (an open object when it declares no input schema)."""
        name = str(card.get("name", ""))
        if not _NAME.match(name):
            raise InvalidArguments(f"{name!r} cannot be a tool name ([A-Za-z0-9_-]{{1,64}})", [])
        input_schema, _ = schemas(card)
        params = input_schema if isinstance(input_schema, dict) else dict(OPEN_OBJECT)
        if params.get("type") != "object":
            params = {"type": "object", "properties": {"value": params}, "required": ["value"]}
        return cls(name, str(card.get("description", "")), params)

    def openai(self) -> dict[str, Any]:
        """The OpenAI (chat completions) declaration."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic(self) -> dict[str, Any]:
        """The Anthropic (messages API) declaration."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}

    def gemini(self) -> dict[str, Any]:
        """The Gemini function declaration (its OpenAPI subset of JSON Schema)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": _gemini(self.parameters),
        }

    def check(self, arguments: Any) -> None:
        """Raises :class:`InvalidArguments` when ``arguments`` break the declared input."""
        violations = Schema(self.parameters).violations("arguments", arguments)
        if violations:
            raise InvalidArguments(
                f"the arguments for {self.name} do not match its input schema "
                f"({counted(violations)})",
                violations,
            )


def _gemini(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_gemini(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    return {k: _gemini(v) for k, v in schema.items() if k not in _GEMINI_DROPS}
