"""Reading what a callee sent back (sans-IO): a final task read as an output or a
failure, and status updates read as typed :class:`Progress` events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import protocol

PROGRESS_TYPES = {
    "workflow_execution_start": "run_started",
    "workflow_node_execution_start": "node_started",
    "workflow_node_execution_result": "node_finished",
    "workflow_map_progress": "map_progress",
    "workflow_approval_request": "approval_requested",
    "workflow_agent_status": "agent_status",
    "workflow_execution_result": "run_finished",
    "workflow_run_steered": "run_steered",
}


@dataclass(frozen=True)
class Progress:
    """One progress event of a call.

    ``kind`` is ``run_started``, ``node_started``, ``node_finished``, ``map_progress``,
    ``approval_requested``, ``agent_status``, ``run_finished``, ``run_steered`` (a
    workflow's DataParts, in ``data``) or ``status`` (an agent's own words, in ``text``).
    ``state`` is the update's A2A state.
    """

    kind: str
    state: str
    data: dict[str, Any] | None = None
    text: str | None = None

    @property
    def node(self) -> str | None:
        """The node the event is about, when it names one."""
        v = (self.data or {}).get("node_id")
        return v if isinstance(v, str) else None


def progress_of(update: dict[str, Any]) -> list[Progress]:
    """The progress events of one status update (a heartbeat without text gives none)."""
    status = update.get("status") or {}
    state = str(status.get("state", ""))
    msg = status.get("message") or {}
    parts = [p for p in msg.get("parts") or [] if isinstance(p, dict)]
    events = []
    for p in parts:
        t = protocol.part_type(p)
        if t in PROGRESS_TYPES:
            events.append(Progress(PROGRESS_TYPES[t], state, dict(p["data"])))
    text = protocol.texts(parts)
    if not events and text:
        events.append(Progress("status", state, text=text))
    return events


@dataclass(frozen=True)
class Output:
    """A completed task's output: inline ``value``, or stored at ``uri`` (an object name or
    a ``nats-object://`` URI) for the caller to fetch."""

    value: Any = None
    uri: str | None = None


@dataclass(frozen=True)
class Failed:
    """A failed or canceled task."""

    state: str
    message: str | None
    kind: str | None
    validation_errors: list[str]


def read_task(task: dict[str, Any]) -> Output | Failed | None:
    """What a final task says; ``None`` while it is not final."""
    status = task.get("status") or {}
    state = status.get("state")
    if state not in protocol.FINAL_STATES:
        return None
    parts = [p for p in (status.get("message") or {}).get("parts") or [] if isinstance(p, dict)]
    for p in parts:
        if protocol.is_node_result(protocol.part_type(p)):
            r = p["data"]
            if r.get("status") != "success":
                return Failed(
                    state,
                    r.get("error_message"),
                    r.get("error_kind"),
                    list(r.get("validation_errors") or []),
                )
            if "output" in r:
                return Output(r["output"])
            if r.get("artifact_name"):
                return Output(uri=str(r["artifact_name"]))
            ref = r.get("output_artifact_ref")
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                v = ref.get("version")
                return Output(uri=ref["name"] if v is None else f"{ref['name']}@v{v}")
            return Output(None)
    if state == "completed":
        for p in parts:
            if (
                p.get("kind") == "data"
                and isinstance(p.get("data"), dict)
                and not _protocol_data(p)
            ):
                return Output(protocol.unwrap(p))
        for p in parts:
            f = p.get("file")
            if p.get("kind") == "file" and isinstance(f, dict) and isinstance(f.get("uri"), str):
                return Output(uri=f["uri"])
        return Output({"text": protocol.texts(parts)})
    data: dict[str, Any] = next(
        (p["data"] for p in parts if p.get("kind") == "data" and isinstance(p.get("data"), dict)),
        {},
    )
    text = protocol.texts(parts) or None
    msg = data.get("error_message") if isinstance(data.get("error_message"), str) else text
    kind = data.get("error_kind") if isinstance(data.get("error_kind"), str) else None
    return Failed(state, msg, kind, list(data.get("validation_errors") or []))


def _protocol_data(part: dict[str, Any]) -> bool:
    t = protocol.part_type(part)
    return t is not None and (t.startswith("workflow_") or t.startswith("structured_invocation_"))
