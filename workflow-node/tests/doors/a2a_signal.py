"""Drives A2A's input-required pattern on a workflow whose wait node waits for a signal,
with the official a2a-sdk client (1.x, A2A 1.0) and raw JSON-RPC in A2A 0.3's shape: the
run's task is input-required and says what it waits for; a message on the task with a
payload the wait node's schema refuses is refused with the schema's error and the task
still waits; one with a good data part completes it with the payload in its output.
Prints `ok CHECK` per check; any failed assertion exits non-zero. Arguments: the server's
base URL, an operator token."""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

BASE, OPERATE = sys.argv[1], sys.argv[2]


def ok(check):
    print(f"ok {check}", flush=True)


def http():
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {OPERATE}"}, timeout=httpx.Timeout(120.0))


def request(parts, task_id=None):
    return SendMessageRequest(
        message=Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts, task_id=task_id or "")
    )


def data(value):
    return Part(data=ParseDict(value, Value()))


def words(task):
    return " ".join(p.text for p in task.status.message.parts if p.HasField("text"))


def output(task):
    for artifact in task.artifacts:
        for part in artifact.parts:
            if part.HasField("data"):
                return MessageToDict(part.data)
    return None


async def v10_checks():
    c = await create_client(f"{BASE}/a2a/Order", client_config=ClientConfig(streaming=False, httpx_client=http()))
    events = [e async for e in c.send_message(request([Part(text="o-1")]))]
    task = events[-1].task
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    assert "signal 'payment'" in words(task) and "node paid" in words(task), words(task)
    ok("input-required")
    try:
        [e async for e in c.send_message(request([data({"amount": "ten"})], task.id))]
        raise AssertionError("a payload its schema refuses was taken")
    except AssertionError:
        raise
    except Exception as e:  # the SDK raises the JSON-RPC error
        assert "does not match its schema" in str(e), e
    still = await c.get_task(GetTaskRequest(id=task.id))
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, still
    ok("refused payload")
    events = [e async for e in c.send_message(request([data({"amount": 5})], task.id))]
    done = events[-1].task
    assert done.id == task.id and done.status.state == TaskState.TASK_STATE_COMPLETED, done
    assert output(done) == {"amount": 5, "order": "o-1"}, done
    ok("signal 1.0")
    try:
        [e async for e in c.send_message(request([data({"amount": 6})], task.id))]
        raise AssertionError("an ended task took a message")
    except AssertionError:
        raise
    except Exception as e:
        assert "waits for no signal" in str(e), e
    ok("ended task")
    await c.close()


async def v03_checks():
    async def rpc(method, params):
        async with http() as h:
            body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
            r = await h.post(f"{BASE}/a2a/Order", content=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
            return r.json()

    def message(parts, task_id=None):
        m = {"kind": "message", "messageId": str(uuid.uuid4()), "role": "user", "parts": parts}
        if task_id:
            m["taskId"] = task_id
        return {"message": m}

    started = await rpc("message/send", message([{"kind": "text", "text": "o-2"}]))
    task = started["result"]
    assert task["status"]["state"] == "input-required", started
    answer = await rpc("message/send", message([{"kind": "data", "data": {"amount": 7}}], task["id"]))
    done = answer["result"]
    assert done["status"]["state"] == "completed", answer
    assert done["artifacts"][0]["parts"][0]["data"] == {"amount": 7, "order": "o-2"}, answer
    ok("signal 0.3")


async def main():
    await v10_checks()
    await v03_checks()


asyncio.run(main())
