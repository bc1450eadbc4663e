"""The protocol's behaviours for agents, written once and run against the conformance
agent of each SDK (``sdk``: agent-sdk's ``conformance-agent`` and the Python SDK's
``agent_py.py``), over a real nats-server. See docs/protocol.md for each rule."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from mesh import CallFailed, CallRefused, Mesh, proof, protocol
from mesh.cards import CardTrust, schemas
from mesh.signing import Signer, sign_card

from .driver import Inbox, bare_working, is_final, says, send_body

REQ = "mesh.a2a.v1.agent.request.{}"
CANCEL = "mesh.a2a.v1.agent.cancel.{}"


async def test_the_card_comes_on_a_ping_signed_with_the_schemas(nc: Any, sdk: Any) -> None:
    cards = await Inbox.open(nc, "mesh.a2a.v1.discovery.agentcards")
    await nc.publish("mesh.a2a.v1.discovery.ping", b"{}")
    _, msg = await cards.wait(lambda v, m: v.get("name") == sdk.name)
    await cards.close()
    trust = CardTrust(agent_keys={sdk.name: sdk.key}, require_signed=True)
    card = trust.admit(msg.data, msg.headers)
    input_schema, output_schema = schemas(card)
    assert input_schema["required"] == ["op"], card
    assert output_schema == {"type": "object"}
    assert card["url"] == f"nats:mesh.a2a.v1.agent.request.{sdk.name}"
    # Bound to another key, the same card is refused.
    with pytest.raises(Exception, match="not by"):
        CardTrust(agent_keys={sdk.name: Signer.generate().public_key}).admit(msg.data, msg.headers)
    # A card altered after signing does not verify.
    with pytest.raises(Exception, match="does not verify"):
        CardTrust().admit(msg.data.replace(b"conformance", b"Conformance"), msg.headers)


async def test_a_call_is_answered_with_its_output(mesh: Mesh, sdk: Any) -> None:
    assert await mesh.call(sdk.name, {"op": "double", "value": 21}) == {"value": 42.0}


async def test_input_is_validated_before_the_handler_and_wrapped_values_unwrapped(
    mesh: Mesh, sdk: Any
) -> None:
    with pytest.raises(CallFailed) as e:
        await mesh.call(sdk.name, 5)  # travels wrapped: {"value": 5}, mesh_wrapped
    assert e.value.kind == "input_validation"
    assert "the agent's input schema" in str(e.value)
    assert e.value.validation_errors and "object" in e.value.validation_errors[0]
    with pytest.raises(CallFailed) as e:
        await mesh.call(sdk.name, {"op": "sing"})
    assert e.value.kind == "input_validation"


async def test_a_handlers_failure_carries_its_kind(mesh: Mesh, sdk: Any) -> None:
    with pytest.raises(CallFailed) as e:
        await mesh.call(sdk.name, {"op": "fail", "text": "upstream down", "kind": "transient"})
    assert (e.value.kind, e.value.state) == ("transient", "failed")
    assert "upstream down" in str(e.value)


async def test_status_updates_of_the_handler_reach_the_caller(mesh: Mesh, sdk: Any) -> None:
    call = await mesh.start(sdk.name, {"op": "status", "text": "half way"})
    seen = [p async for p in call.progress()]
    assert [(p.kind, p.text) for p in seen if p.kind == "status"] == [("status", "half way")]
    assert await call.result() == {"said": "half way"}


async def test_large_inputs_and_outputs_travel_through_the_object_store(
    nc: Any, mesh: Mesh, sdk: Any, node: Any
) -> None:
    big = "y" * 300_000
    # Over the caller's threshold the input goes as a FilePart; the agent reads it.
    call = await mesh.start(sdk.name, {"op": "status", "text": big})
    sent = json.loads(call._body)
    assert sent["params"]["message"]["parts"][0]["kind"] == "file"
    assert await call.result() == {"said": big}
    # Over the agent's threshold the output is stored and named by a FilePart.
    inbox = await Inbox.open(nc)
    _, body = send_body({"op": "big", "size": 300_000})
    await nc.publish(REQ.format(sdk.name), body, reply=inbox.subject)
    reply, _ = await inbox.wait(is_final)
    part = reply["result"]["status"]["message"]["parts"][0]
    assert part["kind"] == "file" and part["file"]["uri"].startswith(
        "nats-object://mesh_artifacts/"
    ), part
    assert len((await mesh.artifacts.get_json(part["file"]["uri"]))["blob"]) == 300_000


async def test_malformed_requests_get_a_json_rpc_error_and_the_agent_keeps_serving(
    nc: Any, mesh: Mesh, sdk: Any
) -> None:
    inbox = await Inbox.open(nc)
    for body, code in [
        (b"not json", protocol.PARSE_ERROR),
        (
            b'{"jsonrpc":"2.0","id":"m1","method":"tasks/resubscribe","params":{}}',
            protocol.UNSUPPORTED_OPERATION,
        ),
        (
            b'{"jsonrpc":"2.0","id":"m3","method":"tasks/sendSubscribe","params":{}}',
            protocol.METHOD_NOT_FOUND,
        ),
        (
            b'{"jsonrpc":"2.0","id":"m2","method":"message/send","params":{"message":'
            b'{"kind":"message","messageId":"m2","role":"user","parts":[{"kind":"data","data":'
            b'{"type":"workflow_node_request"}}]}}}',
            protocol.INVALID_PARAMS,
        ),
    ]:
        await nc.publish(REQ.format(sdk.name), body, reply=inbox.subject)
        await inbox.wait(lambda v, m, c=code: (v.get("error") or {}).get("code") == c)
    assert await mesh.call(sdk.name, {"op": "double", "value": 1}) == {"value": 2.0}


async def test_message_stream_is_message_send_with_its_updates_as_the_stream(
    nc: Any, sdk: Any
) -> None:
    """The NATS binding's message/stream (docs/protocol.md, "A2A over NATS")."""
    inbox = await Inbox.open(nc)
    _, body = send_body({"op": "double", "value": 4})
    streamed = json.loads(body)
    streamed["method"] = "message/stream"
    await nc.publish(REQ.format(sdk.name), json.dumps(streamed).encode(), reply=inbox.subject)
    reply, _ = await inbox.wait(is_final)
    assert "error" not in reply, reply
    assert reply["result"]["status"]["state"] == "completed", reply


async def test_reply_subjects_outside_inboxes_and_the_mesh_are_refused(nc: Any, sdk: Any) -> None:
    elsewhere = await Inbox.open(nc, f"elsewhere.{uuid.uuid4().hex}")
    inbox = await Inbox.open(nc)
    _, body = send_body({"op": "double", "value": 1})
    await nc.publish(
        REQ.format(sdk.name),
        body,
        reply=inbox.subject,
        headers={"Mesh-Reply-To": elsewhere.subject},
    )
    reply, _ = await inbox.wait(is_final)
    assert reply["error"]["code"] == protocol.INVALID_PARAMS
    assert elsewhere.subject in reply["error"]["message"]
    # A later call's answer comes after anything the refused one might have sent.
    _, body = send_body({"op": "double", "value": 2})
    await nc.publish(REQ.format(sdk.name), body, reply=inbox.subject)
    await inbox.wait(
        lambda v, m: ((v.get("result") or {}).get("status") or {}).get("state") == "completed"
    )
    assert elsewhere.messages == []


async def test_tasks_get_answers_for_running_and_ended_tasks(nc: Any, mesh: Mesh, sdk: Any) -> None:
    with pytest.raises(CallRefused) as e:
        await mesh.get_task(sdk.name, "no-such-task")
    assert e.value.code == protocol.TASK_NOT_FOUND
    call = await mesh.start(sdk.name, {"op": "double", "value": 3})
    await call.result()
    task = await mesh.get_task(sdk.name, call.task_id)
    assert task["status"]["state"] == "completed"
    assert task["status"]["message"]["parts"][0]["data"] == {"value": 6.0}


async def gate(
    nc: Any,
    sdk: Any,
    key: str,
    *,
    headers: dict[str, str] | None = None,
    reply: Inbox | None = None,
) -> tuple[str, bytes, Inbox, Inbox]:
    """Starts a ``gate`` call and returns once its handler runs and listens."""
    reply = reply or await Inbox.open(nc)
    status = await Inbox.open(nc)
    tid, body = send_body({"op": "gate", "text": key, "value": 1})
    h = {"Mesh-Status-To": status.subject, **(headers or {})}
    await nc.publish(REQ.format(sdk.name), body, reply=reply.subject, headers=h)
    await status.wait(says(f"gate {key} open"))
    return tid, body, reply, status


async def test_copies_of_a_request_share_one_run_and_a_late_copy_gets_the_same_reply(
    nc: Any, sdk: Any
) -> None:
    key = uuid.uuid4().hex
    _, body, reply, _ = await gate(nc, sdk, key)
    copy_reply, copy_status = await Inbox.open(nc), await Inbox.open(nc)
    await nc.publish(
        REQ.format(sdk.name),
        body,
        reply=copy_reply.subject,
        headers={"Mesh-Status-To": copy_status.subject},
    )
    await copy_status.wait(lambda v, m: v["result"]["status"]["state"] in ("working", "submitted"))
    await nc.publish(f"conformance.release.{key}", b"")
    first, _ = await reply.wait(is_final)
    second, _ = await copy_reply.wait(is_final)
    assert first == second
    assert first["result"]["status"]["message"]["parts"][0]["data"] == {"runs": 1, "value": 1.0}
    late = await Inbox.open(nc)
    await nc.publish(REQ.format(sdk.name), body, reply=late.subject)
    third, _ = await late.wait(is_final)
    assert third == first


async def test_a_running_call_sends_heartbeats(nc: Any, sdk: Any) -> None:
    key = uuid.uuid4().hex
    _, _, reply, status = await gate(nc, sdk, key)
    # Two heartbeats after the handler said it runs (the agents beat every 200 ms here):
    # bare `working` updates, no message.
    opened = next(
        i for i, m in enumerate(status.messages) if says(f"gate {key} open")(json.loads(m.data), m)
    )
    beats = [0]

    def second_beat(v: Any, m: Any) -> bool:
        beats[0] += bare_working(v, m)
        return beats[0] >= 2

    await status.wait(second_beat, after=opened + 1)
    await nc.publish(f"conformance.release.{key}", b"")
    await reply.wait(is_final)


async def test_a_cancel_aborts_the_handler_and_the_task_ends_canceled(nc: Any, sdk: Any) -> None:
    key = uuid.uuid4().hex
    tid, _, reply, _ = await gate(nc, sdk, key)
    cancel = protocol.encode(protocol.cancel_request("c-" + tid, tid))
    await nc.publish(CANCEL.format(sdk.name), cancel)
    final, _ = await reply.wait(is_final)
    assert final["result"]["status"]["state"] == "canceled"
    # Canceled tasks are not remembered: a tasks/get of it finds nothing.
    inbox = await Inbox.open(nc)
    await nc.publish(
        REQ.format(sdk.name), protocol.encode(protocol.get_request("g", tid)), reply=inbox.subject
    )
    got, _ = await inbox.wait(is_final)
    assert got["error"]["code"] == protocol.TASK_NOT_FOUND


def node_request(sub_task_id: str, dialect_type: str = protocol.NODE_REQUEST) -> dict[str, Any]:
    return {
        "type": dialect_type,
        "workflow_name": "Wf",
        "node_id": "n",
        "input_schema": None,
        "output_schema": None,
        "suggested_output_filename": None,
        "sub_task_id": sub_task_id,
    }


async def test_a_call_with_a_token_is_proven_and_stopped_only_by_a_proven_cancel(
    nc: Any, sdk: Any
) -> None:
    token = uuid.uuid4().hex + uuid.uuid4().hex
    sub_task = f"e{uuid.uuid4().hex[:8]}_n_0_1"
    response = await Inbox.open(nc, f"mesh.a2a.v1.agent.response.Wf.{sub_task}")
    status = await Inbox.open(nc, f"mesh.a2a.v1.agent.status.Wf.{sub_task}")
    key = uuid.uuid4().hex
    _, body = send_body(
        {"op": "gate", "text": key, "value": 1},
        task_id=sub_task,
        node_request=node_request(sub_task),
    )
    await nc.publish(
        REQ.format(sdk.name),
        body,
        reply=response.subject,
        headers={"Mesh-Status-To": status.subject, proof.CALL_TOKEN: token},
    )
    _, said = await status.wait(says(f"gate {key} open"))
    assert proof.verify(token, status.subject, said.data, said.headers[proof.CALL_MAC])
    # A cancel without the token's proof does not stop it...
    cancel = protocol.encode(protocol.cancel_request("c1", sub_task))
    await nc.publish(CANCEL.format(sdk.name), cancel)
    # ...one with it does.
    await nc.publish(
        CANCEL.format(sdk.name),
        cancel,
        headers={proof.CALL_MAC: proof.mac(token, CANCEL.format(sdk.name), cancel)},
    )
    final, msg = await response.wait(is_final)
    assert final["result"]["status"]["state"] == "canceled"
    assert proof.verify(token, response.subject, msg.data, msg.headers[proof.CALL_MAC])
    assert msg.headers["Nats-Msg-Id"] == proof.reply_msg_id(token)
    # A token outside the grammar is refused.
    inbox = await Inbox.open(nc)
    await nc.publish(
        REQ.format(sdk.name), body, reply=inbox.subject, headers={proof.CALL_TOKEN: "NOT-HEX"}
    )
    bad, _ = await inbox.wait(is_final)
    assert bad["error"]["code"] == protocol.INVALID_PARAMS


async def test_a_workflows_call_is_answered_with_a_node_result_in_the_requests_dialect(
    nc: Any, sdk: Any
) -> None:
    for request_type, result_type, failure in [
        (protocol.NODE_REQUEST, protocol.NODE_RESULT, "failure"),
        (protocol.REFERENCE_NODE_REQUEST, protocol.REFERENCE_NODE_RESULT, "error"),
    ]:
        sub_task = f"e{uuid.uuid4().hex[:8]}_n_0_2"
        inbox = await Inbox.open(nc)
        _, body = send_body(
            {"op": "double", "value": 4},
            task_id=sub_task,
            node_request=node_request(sub_task, request_type),
        )
        await nc.publish(REQ.format(sdk.name), body, reply=inbox.subject)
        ok, _ = await inbox.wait(is_final)
        result = ok["result"]["status"]["message"]["parts"][0]["data"]
        assert (result["type"], result["status"], result["output"], result["retry_count"]) == (
            result_type,
            "success",
            {"value": 8.0},
            1,
        ), result
        sub_task = f"e{uuid.uuid4().hex[:8]}_n_0_1"
        _, body = send_body(
            {"op": "fail", "text": "no", "kind": "bad"},
            task_id=sub_task,
            node_request=node_request(sub_task, request_type),
        )
        await nc.publish(REQ.format(sdk.name), body, reply=inbox.subject)
        bad, _ = await inbox.wait(lambda v, m, s=sub_task: is_final(v, m) and v.get("id") == s)
        result = bad["result"]["status"]["message"]["parts"][0]["data"]
        assert (result["type"], result["status"], result["error_kind"]) == (
            result_type,
            failure,
            "bad",
        ), result


async def test_a_signed_card_of_a_name_bound_to_another_key_does_not_replace_it(
    nc: Any, sdk: Any
) -> None:
    """The reader side of card trust, with a forged card published on the wire."""
    trust = CardTrust()
    cards = await Inbox.open(nc, "mesh.a2a.v1.discovery.agentcards")
    await nc.publish("mesh.a2a.v1.discovery.ping", b"{}")
    _, real = await cards.wait(lambda v, m: v.get("name") == sdk.name)
    trust.admit(real.data, real.headers)
    forger = Signer.generate()
    forged = protocol.encode({"name": sdk.name, "description": "forged"})
    with pytest.raises(Exception, match="not by"):
        trust.admit(forged, sign_card(forger, sdk.name, forged))
    await cards.close()


async def test_sigterm_drains_running_calls_answer_and_the_agent_exits_0(
    nc: Any, sdk: Any, nats_url: str, keys: Any, workdir: Any
) -> None:
    from ..conftest import start_agent

    name = f"Drain{sdk.sdk.capitalize()}"
    proc = start_agent(sdk.sdk, nats_url, name, keys.seed_file(workdir, sdk.sdk))
    try:
        drained = type(sdk)(sdk.sdk, name, sdk.key)
        key = uuid.uuid4().hex
        _, _, reply, _ = await gate(nc, drained, key)
        proc.popen.terminate()  # SIGTERM
        proc.wait_line("draining")
        assert proc.popen.poll() is None, "it waits for its running call"
        await nc.publish(f"conformance.release.{key}", b"")
        try:
            final, _ = await reply.wait(is_final)
        except TimeoutError:
            raise AssertionError(
                f"no reply after the drain; the agent said: {proc.output()}"
            ) from None
        assert final["result"]["status"]["state"] == "completed"
        assert proc.popen.wait(timeout=30) == 0, proc.output()
    finally:
        proc.kill()
