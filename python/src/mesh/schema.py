"""JSON Schema checks of inputs and outputs, with the schema's defaults applied first
(as agent-sdk does): the handler never sees a value its schema refuses."""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError


class Schema:
    """A compiled JSON Schema (its ``$schema`` dialect, else 2020-12)."""

    def __init__(self, source: Any) -> None:
        if not isinstance(source, (dict, bool)):
            raise ValueError("a JSON Schema is an object or a boolean")
        cls = jsonschema.validators.validator_for(source, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(source)  # type: ignore[arg-type]  # booleans are schemas too
        except SchemaError as e:
            raise ValueError(f"invalid JSON Schema: {e.message}") from e
        self.source = source
        self._validator = cls(source)

    def apply_defaults(self, value: Any) -> None:
        """Fills in missing properties that have a ``default``, recursively."""
        _defaults(self.source, value)

    def violations(self, what: str, value: Any) -> list[str]:
        """Each violation as ``{what}{path}: {message}`` (at most 300 characters), at most
        ten, then a line saying there were more."""
        errors = sorted(
            self._validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path))
        )
        out = []
        for e in errors[:MAX_VIOLATIONS]:
            path = "".join(f"/{p}" for p in e.absolute_path)
            line = f"{what}{path}: {e.message}"
            out.append(line if len(line) <= 300 else line[:299] + "…")
        if len(errors) > MAX_VIOLATIONS:
            out.append("… and more")
        return out


def _defaults(schema: Any, value: Any) -> None:
    if not isinstance(schema, dict) or not isinstance(value, dict):
        return
    props = schema.get("properties")
    if not isinstance(props, dict):
        return
    for name, sub in props.items():
        if isinstance(sub, dict):
            if name not in value and "default" in sub:
                value[name] = sub["default"]
            if name in value:
                _defaults(sub, value[name])


MAX_VIOLATIONS = 10
"""The most violations a refusal lists."""


def counted(violations: list[str]) -> str:
    """``1 violation``, ``N violations`` or ``more than 10 violations``."""
    n = len([v for v in violations if v != "… and more"])
    if "… and more" in violations:
        return f"more than {MAX_VIOLATIONS} violations"
    return "1 violation" if n == 1 else f"{n} violations"
