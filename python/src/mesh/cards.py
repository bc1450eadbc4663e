"""Agent cards (A2A 0.3 with the mesh's extensions) and which cards to trust
(docs/protocol.md, "Signed cards"): :func:`agent_card` builds one, :class:`CardTrust`
decides per card message whether it counts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import signing
from .errors import SignatureError

PROTOCOL_VERSION = "0.3.0"
EXT_AGENT_TYPE = "https://solace.com/a2a/extensions/agent-type"
EXT_SCHEMAS = "https://solace.com/a2a/extensions/sam/schemas"
MAX_TOFU_NAMES = 4096


def skill(id: str, name: str, description: str, tags: list[str] | None = None) -> dict[str, Any]:
    """A card skill."""
    return {"id": id, "name": name, "description": description, "tags": list(tags or [])}


def agent_card(
    name: str,
    description: str,
    ns: str,
    *,
    version: str = "0.1.0",
    skills: list[dict[str, Any]] | None = None,
    input_schema: Any = None,
    output_schema: Any = None,
) -> dict[str, Any]:
    """The card an agent publishes: NATS transport, streaming, the schemas extension when
    it declares a schema."""
    modes = ["text", "application/json"]
    card: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "name": name,
        "description": description,
        "url": f"nats:{ns}.a2a.v1.agent.request.{name}",
        "preferredTransport": "NATS",
        "version": version,
        "capabilities": {"streaming": True},
        "defaultInputModes": modes,
        "defaultOutputModes": modes,
        "skills": list(skills or []),
    }
    params = {}
    if input_schema is not None:
        params["input_schema"] = input_schema
    if output_schema is not None:
        params["output_schema"] = output_schema
    if params:
        card["capabilities"]["extensions"] = [
            {
                "uri": EXT_SCHEMAS,
                "description": "JSON Schemas of the agent's input and output",
                "params": params,
            }
        ]
    return card


def extension(card: Mapping[str, Any], uri: str) -> dict[str, Any]:
    """The params of the card's extension ``uri`` (``{}`` when absent)."""
    for ext in (card.get("capabilities") or {}).get("extensions") or []:
        if isinstance(ext, dict) and ext.get("uri") == uri:
            params = ext.get("params")
            return params if isinstance(params, dict) else {}
    return {}


def is_workflow(card: Mapping[str, Any]) -> bool:
    """Whether the card is a workflow's."""
    return extension(card, EXT_AGENT_TYPE).get("type") == "workflow"


def schemas(card: Mapping[str, Any]) -> tuple[Any, Any]:
    """The card's input and output schemas (``None`` when it declares none)."""
    params = extension(card, EXT_SCHEMAS)
    return params.get("input_schema"), params.get("output_schema")


@dataclass
class CardTrust:
    """Which signer may speak for which name: names bound to keys (``agent_keys``), else the
    first key seen signing a valid card of the name; unsigned cards only for names without a
    key and only while ``require_signed`` is off."""

    agent_keys: dict[str, str] = field(default_factory=dict)
    require_signed: bool = False
    _first_seen: dict[str, str] = field(default_factory=dict)

    def admit(
        self, payload: bytes, headers: Mapping[str, str] | None, now_ms: int | None = None
    ) -> dict[str, Any]:
        """The card when it counts; raises :class:`SignatureError` saying why it does not."""
        try:
            card = json.loads(payload)
        except ValueError as e:
            raise SignatureError(f"the card is not JSON: {e}") from e
        if not isinstance(card, dict) or not isinstance(card.get("name"), str):
            raise SignatureError("the card has no name")
        name = card["name"]
        signer = signing.verify_card(name, payload, headers, now_ms)
        bound = self.agent_keys.get(name) or self._first_seen.get(name)
        if signer is None:
            if self.require_signed:
                raise SignatureError(
                    f"the card of {name} is unsigned and signed cards are required"
                )
            if bound is not None:
                raise SignatureError(
                    f"the card of {name} is unsigned but {name} is bound to {bound}"
                )
            return card
        if bound is None:
            if len(self._first_seen) >= MAX_TOFU_NAMES:
                raise SignatureError(f"{MAX_TOFU_NAMES} names are bound on first use already")
            self._first_seen[name] = signer
            return card
        if bound != signer:
            raise SignatureError(f"the card of {name} is signed by {signer}, not by {bound}")
        return card
