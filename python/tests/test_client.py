"""The caller's side of the Python SDK against a real nats-server: resends on silence with
the same bytes, typed errors, artifacts, and tools declared from cards with arguments
checked before sending."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from mesh import (
    ArtifactError,
    ArtifactStore,
    CallRefused,
    CallTimedOut,
    InvalidArguments,
    Mesh,
    NoSuchAgent,
    protocol,
)

from .conformance.driver import Inbox


async def test_a_silent_callee_gets_the_same_request_again_and_its_answer_ends_the_call(
    nc: Any, mesh: Mesh
) -> None:
    name = f"Silent{uuid.uuid4().hex[:8]}"
    requests = await Inbox.open(nc, f"mesh.a2a.v1.agent.request.{name}")
    call = await mesh.start(name, {"a": 1}, resend_interval=0.2, timeout=30)
    await requests.wait(lambda v, m: len(requests.messages) >= 2)
    first, second = requests.messages[:2]
    assert first.data == second.data, "a resend is the same request, byte for byte"
    assert first.headers["Mesh-Status-To"] == second.headers["Mesh-Status-To"]
    task = protocol.task(
        call.task_id,
        call.task_id,
        "completed",
        protocol.message("agent", [protocol.wrap({"ok": True})]),
    )
    await nc.publish(second.reply, protocol.encode(protocol.response(call.task_id, task)))
    assert await call.result() == {"ok": True}
    assert call.sends >= 2


async def test_nobody_serving_and_silence_until_the_timeout_are_told_apart(
    nc: Any, mesh: Mesh
) -> None:
    with pytest.raises(NoSuchAgent):
        await mesh.call(f"Nobody{uuid.uuid4().hex[:8]}", {}, timeout=10)
    name = f"Mute{uuid.uuid4().hex[:8]}"
    requests = await Inbox.open(nc, f"mesh.a2a.v1.agent.request.{name}")
    with pytest.raises(CallTimedOut):
        await mesh.call(name, {}, timeout=0.5, resend_interval=0.2)
    assert len(requests.messages) >= 2
    await requests.close()


async def test_a_json_rpc_error_is_a_refusal_with_its_code(nc: Any, mesh: Mesh) -> None:
    name = f"Refuser{uuid.uuid4().hex[:8]}"

    async def refuse(msg: Any) -> None:
        rid = json.loads(msg.data)["id"]
        await nc.publish(msg.reply, protocol.encode(protocol.error_response(rid, -32010, "no")))

    sub = await nc.subscribe(f"mesh.a2a.v1.agent.request.{name}", cb=refuse)
    with pytest.raises(CallRefused) as e:
        await mesh.call(name, {}, timeout=10)
    assert (e.value.code, e.value.message) == (-32010, "no")
    await sub.unsubscribe()


async def test_artifacts_are_versioned_listed_by_run_and_read_back(nc: Any, node: Any) -> None:
    run = uuid.uuid4().hex
    store = ArtifactStore(nc, run=run)
    name = f"report-{uuid.uuid4().hex}"
    first = await store.put(name, b"one", "text/plain")
    second = await store.put(name, b"two", "text/plain")
    assert (first.version, second.version) == (1, 2)
    assert await store.get(first) == b"one"
    assert await store.get(name) == b"two"  # the name follows the latest version
    listed = await store.list(run)
    assert [(a.ref.version, a.mime, a.size) for a in listed] == [
        (1, "text/plain", 3),
        (2, "text/plain", 3),
    ]
    with pytest.raises(ArtifactError) as e:
        await store.get(f"missing-{uuid.uuid4().hex}")
    assert e.value.kind == "not-found"
    with pytest.raises(ArtifactError):
        await store.put(f"{name}@v3", b"x")


async def test_cards_are_tools_and_bad_arguments_never_leave_the_caller(
    nc: Any, mesh: Mesh, agents: Any, node: Any
) -> None:
    catalog = await mesh.catalog()
    assert await catalog.wait_for("Mixed", 10) is not None
    tool = catalog.tool("Mixed")
    assert tool is not None
    assert tool.openai()["function"]["parameters"]["required"] == ["value", "key"]
    assert tool.anthropic()["input_schema"] == tool.parameters
    assert "name" in tool.gemini() and "parameters" in tool.gemini()
    requests = await Inbox.open(nc, "mesh.a2a.v1.agent.request.Mixed")
    with pytest.raises(InvalidArguments) as e:
        await catalog.call_tool("Mixed", {"value": "five"})
    assert e.value.errors
    await nc.flush()  # a request we had sent would have come back before this answer
    assert requests.messages == []
    await requests.close()
    await catalog.close()
