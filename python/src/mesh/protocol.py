"""The sans-IO half of the protocol (docs/protocol.md): JSON-RPC envelopes, parts and the
value conventions (wrapped non-objects, object-store FileParts), decoding a request into a
:class:`Call`, and building replies and status updates. Nothing here touches the network,
so every malformed input is a value (:class:`Reject`), never an exception.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import proof

Json = Any
"""A JSON value as ``json.loads`` gives it."""

JSONRPC = "2.0"
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
UNSUPPORTED_OPERATION = -32004
NOT_PERMITTED = -32010

MESH_WRAPPED = "mesh_wrapped"
JSON_MIME = "application/json"
NODE_REQUEST = "workflow_node_request"
NODE_RESULT = "workflow_node_result"
REFERENCE_NODE_REQUEST = "structured_invocation_request"
REFERENCE_NODE_RESULT = "structured_invocation_result"
FINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})

KIND_INPUT_VALIDATION = "input_validation"
KIND_OUTPUT_VALIDATION = "output_validation"
KIND_CANCELED = "canceled"

MSG_ID = "Nats-Msg-Id"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


# --- parts and values -------------------------------------------------------------------


def text_part(text: str) -> dict[str, Json]:
    """A TextPart."""
    return {"kind": "text", "text": text}


def data_part(
    data: Mapping[str, Json], metadata: Mapping[str, Json] | None = None
) -> dict[str, Json]:
    """A DataPart."""
    part: dict[str, Json] = {"kind": "data", "data": dict(data)}
    if metadata:
        part["metadata"] = dict(metadata)
    return part


def wrap(value: Json) -> dict[str, Json]:
    """A value as a DataPart: an object as is, anything else as ``{"value": v}`` marked
    ``mesh_wrapped``."""
    if isinstance(value, dict):
        return data_part(value)
    return data_part({"value": value}, {MESH_WRAPPED: True})


def is_wrapped(metadata: Mapping[str, Json] | None) -> bool:
    """Whether a part's metadata marks it wrapped."""
    return bool(metadata and metadata.get(MESH_WRAPPED) is True)


def unwrap(part: Mapping[str, Json]) -> Json:
    """The value a DataPart carries (``data.value`` when wrapped)."""
    data = part.get("data")
    if is_wrapped(part.get("metadata")):
        return data.get("value") if isinstance(data, dict) else None
    return data


def object_uri(bucket: str, name: str) -> str:
    """``nats-object://{bucket}/{name}``."""
    return f"nats-object://{bucket}/{name}"


def parse_object_uri(uri: str) -> tuple[str, str] | None:
    """The bucket and object name of a ``nats-object://`` URI."""
    prefix = "nats-object://"
    if not uri.startswith(prefix):
        return None
    bucket, _, name = uri[len(prefix) :].partition("/")
    if not bucket or not name:
        return None
    return bucket, name


def artifact_part(bucket: str, name: str, *, wrapped: bool = False) -> dict[str, Json]:
    """A FilePart naming an object of the artifact bucket."""
    part: dict[str, Json] = {
        "kind": "file",
        "file": {"uri": object_uri(bucket, name), "name": name, "mimeType": JSON_MIME},
    }
    if wrapped:
        part["metadata"] = {MESH_WRAPPED: True}
    return part


def part_type(part: Mapping[str, Json]) -> str | None:
    """The ``type`` of a DataPart's data, when it has one."""
    data = part.get("data") if part.get("kind") == "data" else None
    t = data.get("type") if isinstance(data, dict) else None
    return t if isinstance(t, str) else None


def is_node_request(t: str | None) -> bool:
    """Whether a DataPart type is the node request, in either dialect."""
    return t in (NODE_REQUEST, REFERENCE_NODE_REQUEST)


def is_node_result(t: str | None) -> bool:
    """Whether a DataPart type is the node result, in either dialect."""
    return t in (NODE_RESULT, REFERENCE_NODE_RESULT)


def texts(parts: list[Json]) -> str:
    """The text parts joined by newlines."""
    return "\n".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("kind") == "text" and isinstance(p.get("text"), str)
    )


# --- envelopes --------------------------------------------------------------------------


def response(id: Json, result: Json) -> dict[str, Json]:
    """A JSON-RPC result."""
    return {"jsonrpc": JSONRPC, "id": id, "result": result}


def error_response(id: Json, code: int, message: str, data: Json = None) -> dict[str, Json]:
    """A JSON-RPC error."""
    error: dict[str, Json] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC, "id": id, "error": error}


def encode(value: Json) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def message(
    role: str,
    parts: list[Json],
    *,
    message_id: str | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
    metadata: Mapping[str, Json] | None = None,
) -> dict[str, Json]:
    """An A2A Message."""
    m: dict[str, Json] = {
        "kind": "message",
        "messageId": message_id or uuid.uuid4().hex,
        "role": role,
        "parts": parts,
    }
    if task_id is not None:
        m["taskId"] = task_id
    if context_id is not None:
        m["contextId"] = context_id
    if metadata:
        m["metadata"] = dict(metadata)
    return m


def send_request(
    id: str, msg: Mapping[str, Json], metadata: Mapping[str, Json] | None = None
) -> dict[str, Json]:
    """A ``message/send`` request."""
    params: dict[str, Json] = {"message": dict(msg)}
    if metadata:
        params["metadata"] = dict(metadata)
    return {"jsonrpc": JSONRPC, "id": id, "method": "message/send", "params": params}


def cancel_request(id: str, task_id: str, reason: str | None = None) -> dict[str, Json]:
    """A ``tasks/cancel`` request."""
    params: dict[str, Json] = {"id": task_id}
    if reason is not None:
        params["metadata"] = {"reason": reason}
    return {"jsonrpc": JSONRPC, "id": id, "method": "tasks/cancel", "params": params}


def get_request(id: str, task_id: str) -> dict[str, Json]:
    """A ``tasks/get`` request."""
    return {"jsonrpc": JSONRPC, "id": id, "method": "tasks/get", "params": {"id": task_id}}


# --- decoding a request -----------------------------------------------------------------


@dataclass
class InputInline:
    """The input, inline (already unwrapped)."""

    value: Json


@dataclass
class InputArtifact:
    """The input, in the object store; ``wrapped`` when the stored JSON is ``{"value": v}``."""

    uri: str
    wrapped: bool


@dataclass
class InputUnsupported:
    """An input part that cannot be used; ``why`` says so."""

    why: str


InputSource = InputInline | InputArtifact | InputUnsupported


@dataclass
class WorkflowCall:
    """The workflow side of a call: which run, node and attempt asked."""

    workflow_name: str
    node_id: str
    execution_id: str
    sub_task_id: str
    attempt: int | None = None
    map_index: int | None = None
    loop_iteration: int | None = None

    @property
    def slot_key(self) -> str:
        """The sub-task id without its attempt."""
        return self.sub_task_id.rsplit("_", 1)[0]


@dataclass
class Call:
    """A decoded ``message/send``."""

    id: Json
    reply_to: str | None
    status_to: str | None
    headers: dict[str, str]
    token: str | None
    task_id: str
    context_id: str
    message_id: str
    node_request: dict[str, Json] | None
    workflow: WorkflowCall | None
    instruction: str | None
    input: InputSource
    reference_dialect: bool = False

    @property
    def dedup_key(self) -> str:
        """What tells copies of this call apart from other calls: the task id, and the
        token when there is one (a request with the id but not the token is another call)."""
        return f"{self.task_id}\x1f{self.token}" if self.token else self.task_id

    def reply_headers(self) -> dict[str, str]:
        """``Nats-Msg-Id`` (from the token, else the task id) and the trace context."""
        msg_id = proof.reply_msg_id(self.token) if self.token else self.task_id
        return {MSG_ID: msg_id, **trace_context(self.headers)}


@dataclass
class Cancel:
    """A ``tasks/cancel`` of ``task_id``."""

    id: Json
    task_id: str
    reply_to: str | None


@dataclass
class Get:
    """A ``tasks/get`` of ``task_id``."""

    id: Json
    task_id: str
    reply_to: str | None


@dataclass
class Reject:
    """Unusable: answer ``response`` (when there is somewhere to answer)."""

    reply_to: str | None
    response: dict[str, Json] = field(default_factory=dict)


Decoded = Call | Cancel | Get | Reject


def _valid_id(v: Json) -> bool:
    return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))


def id_text(v: Json) -> str:
    """A JSON-RPC id as text."""
    return v if isinstance(v, str) else json.dumps(v)


def reply_subject(headers: Mapping[str, str], reply: str | None) -> str | None:
    """``Mesh-Reply-To`` when present, else the NATS reply."""
    r = headers.get("Mesh-Reply-To", "").strip()
    return r or reply or None


def trace_context(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's W3C trace context, each header kept only when it follows its grammar."""
    out: dict[str, str] = {}
    tp = headers.get(TRACEPARENT, "").strip()
    parts = tp.split("-")
    hexd = set("0123456789abcdef")
    if (
        len(parts) == 4
        and [len(p) for p in parts] == [2, 32, 16, 2]
        and all(set(p) <= hexd for p in parts)
        and parts[0] != "ff"
        and parts[1] != "0" * 32
        and parts[2] != "0" * 16
    ):
        out[TRACEPARENT] = tp
        ts = headers.get(TRACESTATE, "").strip()
        if ts and len(ts) <= 512 and all(c.isascii() and c.isprintable() for c in ts):
            out[TRACESTATE] = ts
    return out


def decode(payload: bytes, headers: Mapping[str, str], reply: str | None) -> Decoded:
    """Decodes one message from the request or cancel subject."""
    reply_to = reply_subject(headers, reply)
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as e:
        return Reject(reply_to, error_response(None, PARSE_ERROR, str(e)))
    if not isinstance(value, dict):
        return Reject(reply_to, error_response(None, INVALID_REQUEST, "a request is a JSON object"))
    rid = value.get("id")
    if not _valid_id(rid):
        return Reject(
            reply_to, error_response(None, INVALID_REQUEST, "id must be a string or an integer")
        )
    if value.get("jsonrpc") != JSONRPC:
        return Reject(reply_to, error_response(rid, INVALID_REQUEST, 'jsonrpc must be "2.0"'))
    method = value.get("method")
    params = value.get("params")
    if method == "tasks/resubscribe":
        return Reject(
            reply_to,
            error_response(
                rid,
                UNSUPPORTED_OPERATION,
                "tasks/resubscribe is not served on NATS: rejoin a task's stream by "
                "resending its request (same task id, a new Mesh-Status-To)",
            ),
        )
    # message/stream is message/send on NATS: the stream is the status updates sent to
    # Mesh-Status-To (docs/protocol.md, "A2A over NATS").
    if method == "message/stream":
        method = "message/send"
    if method not in ("message/send", "tasks/cancel", "tasks/get"):
        return Reject(
            reply_to, error_response(rid, METHOD_NOT_FOUND, f"method not found: {method}")
        )
    if not isinstance(params, dict):
        return Reject(reply_to, error_response(rid, INVALID_PARAMS, "params must be an object"))
    if method != "message/send":
        task_id = params.get("id")
        if not isinstance(task_id, str):
            return Reject(
                reply_to, error_response(rid, INVALID_PARAMS, "params.id must be a string")
            )
        return (Cancel if method == "tasks/cancel" else Get)(rid, task_id, reply_to)
    token = headers.get(proof.CALL_TOKEN)
    if token is not None:
        try:
            proof.check_token(token)
        except ValueError as e:
            return Reject(reply_to, error_response(rid, INVALID_PARAMS, str(e)))
    msg = params.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("parts"), list):
        return Reject(
            reply_to, error_response(rid, INVALID_PARAMS, "params.message with parts is required")
        )
    parts: list[Json] = [p for p in msg["parts"] if isinstance(p, dict)]
    if not isinstance(msg.get("messageId"), str):
        return Reject(
            reply_to, error_response(rid, INVALID_PARAMS, "params.message.messageId is required")
        )
    node_request = None
    reference = False
    for p in parts:
        t = part_type(p)
        if is_node_request(t):
            data = p["data"]
            if not isinstance(data.get("workflow_name"), str) or not isinstance(
                data.get("node_id"), str
            ):
                return Reject(
                    reply_to,
                    error_response(
                        rid,
                        INVALID_PARAMS,
                        f"malformed {NODE_REQUEST}: workflow_name and node_id are required",
                    ),
                )
            node_request = data
            reference = t == REFERENCE_NODE_REQUEST
            break
    meta: dict[str, Json] = params["metadata"] if isinstance(params.get("metadata"), dict) else {}

    def s(v: Json) -> str | None:
        return v if isinstance(v, str) else None

    own = id_text(rid)
    if node_request is not None:
        task_id = (
            s(node_request.get("sub_task_id"))
            or s(meta.get("sub_task_id"))
            or s(msg.get("taskId"))
            or own
        )
    else:
        task_id = s(msg.get("taskId")) or own
    workflow = None
    if node_request is not None:
        attempt = node_request.get("attempt")
        if not isinstance(attempt, int):
            last = task_id.rsplit("_", 1)[-1].split("-")[0] if "_" in task_id else ""
            attempt = int(last) if last.isdigit() else None
        workflow = WorkflowCall(
            workflow_name=node_request["workflow_name"],
            node_id=node_request["node_id"],
            execution_id=s(node_request.get("execution_id"))
            or s(meta.get("execution_id"))
            or s(msg.get("contextId"))
            or "",
            sub_task_id=task_id,
            attempt=attempt,
            map_index=node_request.get("map_index")
            if isinstance(node_request.get("map_index"), int)
            else None,
            loop_iteration=node_request.get("loop_iteration")
            if isinstance(node_request.get("loop_iteration"), int)
            else None,
        )
    context_id = s(msg.get("contextId")) or (workflow.execution_id if workflow else None) or task_id
    text = texts(parts)
    source = find_input(parts)
    if source is None:
        if node_request is not None:
            source, instruction = InputInline({}), text or None
        else:
            source, instruction = InputInline({"text": text}), None
    else:
        instruction = text or None
    status_to = headers.get("Mesh-Status-To", "").strip() or None
    return Call(
        id=rid,
        reply_to=reply_to,
        status_to=status_to,
        headers=dict(headers),
        token=token,
        task_id=task_id,
        context_id=context_id,
        message_id=msg["messageId"],
        node_request=node_request,
        workflow=workflow,
        instruction=instruction,
        input=source,
        reference_dialect=reference,
    )


def find_input(parts: list[Json]) -> InputSource | None:
    """The first DataPart that is not the node request, else the first FilePart."""
    for p in parts:
        if (
            p.get("kind") == "data"
            and isinstance(p.get("data"), dict)
            and not is_node_request(part_type(p))
        ):
            return InputInline(unwrap(p))
    for p in parts:
        if p.get("kind") == "file":
            f = p.get("file")
            uri = f.get("uri") if isinstance(f, dict) else None
            if isinstance(uri, str):
                return InputArtifact(uri, is_wrapped(p.get("metadata")))
            return InputUnsupported(
                "inline file bytes are not supported; send a DataPart or a nats-object:// reference"
            )
    return None


# --- outcomes and replies ---------------------------------------------------------------


@dataclass
class Success:
    """The output: inline, or stored as ``artifact`` (an object name) in ``bucket``."""

    output: Json = None
    bucket: str | None = None
    artifact: str | None = None


@dataclass
class Failure:
    """The handler failed, or the input could not be read or checked."""

    message: str
    kind: str | None = None
    validation_errors: list[str] = field(default_factory=list)


@dataclass
class Canceled:
    """Cancelled by a ``tasks/cancel``."""


Outcome = Success | Failure | Canceled


def _rewrite(data: dict[str, Json], reference: bool) -> dict[str, Json]:
    if not reference:
        return data
    t = data.get("type")
    if t == NODE_RESULT:
        data["type"] = REFERENCE_NODE_RESULT
    if isinstance(t, str) and (t.startswith("workflow_") or t == REFERENCE_NODE_RESULT):
        if data.get("status") in ("failure", "timed_out"):
            data["status"] = "error"
    return data


def outcome_parts(call: Call | None, outcome: Outcome) -> tuple[str, list[Json]]:
    """The A2A state and the parts of the reply to ``call`` (``None``: a plain call)."""
    if call is not None and call.workflow is not None:
        retry = max((call.workflow.attempt or 1) - 1, 0)
        text = None
        if isinstance(outcome, Success):
            state = "completed"
            result: dict[str, Json] = {"type": NODE_RESULT, "status": "success"}
            if outcome.artifact is not None:
                result["artifact_name"] = outcome.artifact
            else:
                result["output"] = outcome.output
        elif isinstance(outcome, Failure):
            state = "failed"
            result = {"type": NODE_RESULT, "status": "failure", "error_message": outcome.message}
            if outcome.kind is not None:
                result["error_kind"] = outcome.kind
            if outcome.validation_errors:
                result["validation_errors"] = outcome.validation_errors
            text = outcome.message
        else:
            state = "canceled"
            result = {
                "type": NODE_RESULT,
                "status": "failure",
                "error_message": "canceled",
                "error_kind": KIND_CANCELED,
            }
            text = "canceled"
        result["retry_count"] = retry
        parts: list[Json] = [data_part(_rewrite(result, call.reference_dialect))]
        if text is not None:
            parts.append(text_part(text))
        return state, parts
    if isinstance(outcome, Success):
        if outcome.artifact is not None and outcome.bucket is not None:
            return "completed", [artifact_part(outcome.bucket, outcome.artifact)]
        return "completed", [wrap(outcome.output)]
    if isinstance(outcome, Failure):
        data: dict[str, Json] = {"error_message": outcome.message}
        if outcome.kind is not None:
            data["error_kind"] = outcome.kind
        if outcome.validation_errors:
            data["validation_errors"] = outcome.validation_errors
        return "failed", [text_part(outcome.message), data_part(data)]
    return "canceled", [text_part("canceled")]


def task(task_id: str, context_id: str, state: str, msg: Json = None) -> dict[str, Json]:
    """An A2A Task."""
    status: dict[str, Json] = {"state": state}
    if msg is not None:
        status["message"] = msg
    return {"kind": "task", "id": task_id, "contextId": context_id, "status": status}


def reply(call: Call, outcome: Outcome) -> dict[str, Json]:
    """The JSON-RPC response answering ``call`` with ``outcome``."""
    state, parts = outcome_parts(call, outcome)
    msg = message(
        "agent",
        parts,
        message_id=f"{call.task_id}-reply",
        task_id=call.task_id,
        context_id=call.context_id,
    )
    return response(call.id, task(call.task_id, call.context_id, state, msg))


def status_update(call: Call, state: str, parts: list[Json] | None = None) -> dict[str, Json]:
    """A status update for ``Mesh-Status-To`` (with a message when ``parts`` are given)."""
    status: dict[str, Json] = {"state": state}
    if parts is not None:
        status["message"] = message(
            "agent",
            parts,
            message_id=f"{call.task_id}-status-{uuid.uuid4().hex}",
            task_id=call.task_id,
            context_id=call.context_id,
        )
    event = {
        "kind": "status-update",
        "taskId": call.task_id,
        "contextId": call.context_id,
        "status": status,
        "final": False,
    }
    return response(call.id, event)


def get_answer(id: Json, task_id: str, known: Running | Outcome | None) -> dict[str, Json]:
    """The answer to a ``tasks/get``: what this agent knows of the task, else -32001."""
    if known is None:
        return error_response(
            id, TASK_NOT_FOUND, f"task {task_id} is neither running here nor recently ended"
        )
    if isinstance(known, Running):
        return response(id, task(task_id, task_id, "working" if known.started else "submitted"))
    state, parts = outcome_parts(None, known)
    msg = message("agent", parts, message_id=f"{task_id}-state", task_id=task_id)
    return response(id, task(task_id, task_id, state, msg))


def cancel_answer(id: Json, task_id: str, found: bool) -> dict[str, Json]:
    """The answer to a ``tasks/cancel`` itself."""
    if found:
        return response(id, task(task_id, task_id, "canceled"))
    return error_response(id, TASK_NOT_FOUND, f"task {task_id} is not running here")


@dataclass
class Running:
    """A task that runs here; ``started`` once its handler has a slot."""

    started: bool
