"""The errors of the SDK: one base class, one subclass per way a call or a serve can fail.

A caller catches :class:`CallError` for every failure of a call and tells them apart by
subclass (failed, refused, timed out, no such agent); the fields say what the mesh said.
"""

from __future__ import annotations

from typing import Any


class MeshError(Exception):
    """Anything the SDK raises."""


class CallError(MeshError):
    """A call to an agent or workflow did not produce an output."""


class CallFailed(CallError):
    """The callee answered with a failure.

    ``node`` is the workflow node that failed (for a workflow), ``kind`` the error kind
    (``input_validation``, ``timeout``, an agent's own kind), ``state`` the A2A state
    (``failed`` or ``canceled``), ``data`` the failure's DataPart when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        node: str | None = None,
        kind: str | None = None,
        state: str = "failed",
        validation_errors: list[str] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.kind = kind
        self.state = state
        self.validation_errors = validation_errors or []
        self.data = data


class CallRefused(CallError):
    """The callee refused the request with a JSON-RPC error (``code``, ``message``)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"refused ({code}): {message}")
        self.code = code
        self.message = message
        self.data = data


class CallTimedOut(CallError):
    """No final reply came within the call's timeout."""


class NoSuchAgent(CallError):
    """Nobody serves the name (NATS answered "no responders" and the callee never lived)."""


class InvalidArguments(MeshError):
    """Arguments (an LLM's tool call, or a caller's input) that break the declared schema."""

    def __init__(self, message: str, errors: list[str]) -> None:
        super().__init__(message)
        self.errors = errors


class SignatureError(MeshError):
    """A seed, key or signature that cannot be used."""


class ArtifactError(MeshError):
    """An artifact that cannot be stored or read; ``kind`` is the reader's refusal kind
    (``not-found``, ``too-large``, ``invalid``, ``unavailable``) when a node said one."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class ServeError(MeshError):
    """An agent that cannot start serving (bad schema, no connection)."""
