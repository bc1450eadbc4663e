"""Drives the A2A door with the official a2a-sdk client (1.x: A2A 1.0, and 0.3 through
its compatibility transport) and raw JSON-RPC for hostile input. Prints `ok CHECK` for
each check passed; any failed assertion exits non-zero. Arguments: the server's base URL,
a read token, an operator token."""

import asyncio
import hashlib
import hmac
import json
import queue
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

BASE, READ, OPERATE, OTHER = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def ok(check):
    print(f"ok {check}", flush=True)


def http(token):
    return httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(120.0)
    )


def message(text):
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
        )
    )


def data_of(task):
    """The output artifact's data, as a dict."""
    for artifact in task.artifacts:
        for part in artifact.parts:
            if part.HasField("data"):
                return MessageToDict(part.data)
    return None


async def client_for(name, token, streaming=True, base=BASE):
    return await create_client(
        f"{base}/a2a/{name}",
        client_config=ClientConfig(streaming=streaming, httpx_client=http(token)),
    )


async def card_check():
    async with http(READ) as h:
        r = await h.get(f"{BASE}/a2a/Greet/.well-known/agent-card.json")
        assert r.status_code == 200, r.text
        card = r.json()
    assert card["url"] == f"{BASE}/a2a/Greet", card
    assert card["preferredTransport"] == "JSONRPC", card
    assert card["capabilities"]["streaming"] is True, card
    assert card["capabilities"]["pushNotifications"] is True, card
    assert card["securitySchemes"]["bearer"]["scheme"] == "bearer", card
    transports = {i["transport"] for i in card["additionalInterfaces"]}
    assert transports == {"JSONRPC", "NATS"}, card
    versions = {i["protocolVersion"] for i in card["supportedInterfaces"] if i["protocolBinding"] == "JSONRPC"}
    assert versions == {"1.0", "0.3"}, card
    async with http(READ) as h:
        r = await h.get(f"{BASE}/a2a/Talker/.well-known/agent-card.json")
        assert r.json()["capabilities"]["pushNotifications"] is False, r.text
    ok("card")
    return card


async def send_check():
    c = await client_for("Greet", OPERATE, streaming=False)
    events = [e async for e in c.send_message(message("hello"))]
    assert len(events) == 1 and events[0].HasField("task"), events
    task = events[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert data_of(task) == {"said": "hello"}, task
    ok("send")
    got = await c.get_task(GetTaskRequest(id=task.id))
    assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED, got
    ok("get")
    await c.close()
    return task.id


async def stream_check():
    c = await client_for("Greet", OPERATE)
    events = [e async for e in c.send_message(message("streamed"))]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task", kinds
    assert kinds[-1] == "status_update", kinds
    assert "artifact_update" in kinds, kinds
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED, last
    words = [
        p.text
        for e in events
        if e.HasField("status_update") and e.status_update.status.HasField("message")
        for p in e.status_update.status.message.parts
        if p.HasField("text")
    ]
    assert any("thinking about it" in w for w in words), words
    ids = {e.status_update.task_id for e in events if e.HasField("status_update")}
    assert ids == {events[0].task.id}, ids
    await c.close()
    ok("stream")


async def gate_checks():
    """A run that waits at its gate: its stream dropped, rejoined, then cancelled."""
    c = await client_for("Gate", OPERATE)
    stream = c.send_message(message("wait here"))
    first = await stream.__anext__()
    assert first.HasField("task"), first
    task_id = first.task.id
    # Read until the agent's node is done, so the run is at its gate; then drop the stream.
    async for e in stream:
        if e.HasField("status_update") and "first" in json.dumps(MessageToDict(e)) and "success" in json.dumps(MessageToDict(e)):
            break
    await stream.aclose()
    # Rejoined at the other replica of the door.
    reader = await client_for("Gate", READ, base=OTHER)
    sub = reader.subscribe(SubscribeToTaskRequest(id=task_id))
    now = await sub.__anext__()
    assert now.HasField("task") and now.task.id == task_id, now
    assert now.task.status.state in (
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_INPUT_REQUIRED,
    ), now
    events = []
    async for e in sub:
        events.append(MessageToDict(e))
        if any(
            d.get("data", {}).get("event") == "started"
            for d in e.status_update.status.message.parts and [MessageToDict(p) for p in e.status_update.status.message.parts]
        ):
            break
    ok("resubscribe")
    # A read token may not cancel.
    try:
        await reader.cancel_task(CancelTaskRequest(id=task_id))
        raise AssertionError("a read token cancelled a task")
    except AssertionError:
        raise
    except Exception as e:  # the SDK raises its HTTP error
        assert "403" in str(e) or "operator" in str(e), e
    cancelled = await c.cancel_task(CancelTaskRequest(id=task_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED, cancelled
    # The rejoined stream sees the end.
    states = [e.status_update.status.state async for e in sub if e.HasField("status_update")]
    assert states and states[-1] == TaskState.TASK_STATE_CANCELED, states
    ok("cancel")
    listed = await reader.list_tasks(ListTasksRequest(page_size=10))
    assert task_id in [t.id for t in listed.tasks], listed
    ok("list")
    await c.close()
    await reader.close()
    return task_id


async def v03_checks(card):
    """The SDK's 0.3 transport, chosen by a card that names 0.3 only."""
    legacy = {k: v for k, v in card.items() if k not in ("supportedInterfaces", "securityRequirements")}
    legacy["additionalInterfaces"] = [i for i in legacy["additionalInterfaces"] if i["transport"] == "JSONRPC"]
    parsed = parse_agent_card(json.loads(json.dumps(legacy)))
    assert parsed.supported_interfaces[0].protocol_version.startswith("0.3"), parsed
    from a2a.client import ClientFactory

    for streaming, check in ((False, "v0.3 send"), (True, "v0.3 stream")):
        c = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http(OPERATE))).create(parsed)
        events = [e async for e in c.send_message(message("old"))]
        last = events[-1]
        state = last.task.status.state if last.HasField("task") else last.status_update.status.state
        assert state == TaskState.TASK_STATE_COMPLETED, events
        ok(check)


async def hostile_checks(other_task):
    async def rpc(body, token=OPERATE, raw=None, name="Greet"):
        async with http(token) as h:
            content = raw if raw is not None else json.dumps(body).encode()
            r = await h.post(
                f"{BASE}/a2a/{name}", content=content, headers={"Content-Type": "application/json"}
            )
            return r.status_code, (r.json() if r.content else None)

    def code(answer):
        return answer[1]["error"]["code"]

    status, body = await rpc(None, raw=b"x" * (2 << 20))
    assert status == 413 and body["error"]["code"] == -32600, (status, body)
    assert code(await rpc(None, raw=b"{not json")) == -32700
    assert code(await rpc({"jsonrpc": "2.0", "id": 1, "method": "tasks/nope"})) == -32601
    assert code(await rpc([{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}])) == -32600
    send = {"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "x"}]}}}
    assert (await rpc(send, token=READ))[0] == 403
    assert (await rpc(send, token="nobody"))[0] == 401
    get = lambda tid: {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": tid}}
    assert code(await rpc(get("run-nothing"))) == -32001
    # A task of Greet is no task of Gate.
    assert code(await rpc(get(other_task), name="Gate")) == -32001
    # An agent's task takes no push config.
    push = {"jsonrpc": "2.0", "id": 4, "method": "tasks/pushNotificationConfig/set",
            "params": {"taskId": other_task, "pushNotificationConfig": {"url": "http://127.0.0.1:1/"}}}
    assert code(await rpc(push, name="Talker")) == -32003
    push["params"]["pushNotificationConfig"]["url"] = "file:///etc/passwd"
    assert code(await rpc(push)) == -32602
    status, _ = await rpc(get(other_task), name="Nobody")
    assert status == 404
    ok("hostile")


def receiver():
    """A webhook receiver on loopback: answers its first POST 503 (the receiver is
    down), then 200; every POST goes on the queue as (status answered, headers, body)."""
    posts = queue.Queue()
    answered = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = 503 if not answered else 200
            answered.append(status)
            self.send_response(status)
            self.end_headers()
            posts.put((status, {k.lower(): v for k, v in self.headers.items()}, body))

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", posts


async def delivered(posts):
    """The next POST answered 200."""
    while True:
        status, headers, body = await asyncio.to_thread(posts.get, True, 120)
        if status == 200:
            return headers, body


def verified(headers, body, token, config_id):
    at = headers["mesh-push-timestamp"]
    mac = hmac.new(token.encode(), f"a2a-push-v1\n{at}\n{config_id}\n".encode() + body, hashlib.sha256)
    assert headers["mesh-push-signature"] == "v1=" + mac.hexdigest(), headers
    assert headers["x-a2a-notification-token"] == token, headers
    return json.loads(body)


async def push_checks():
    url, posts = receiver()
    c = await client_for("Gate", OPERATE)
    stream = c.send_message(message("push me"))
    first = await stream.__anext__()
    task_id = first.task.id
    await stream.aclose()
    token = "tok-" + uuid.uuid4().hex
    made = await c.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task_id, id="hook1", url=url, token=token)
    )
    assert made.id == "hook1" and made.url == url, made
    listed = await c.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task_id))
    assert [x.id for x in listed.configs] == ["hook1"], listed
    got = await c.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook1"))
    assert got.url == url, got
    # The run reaches its gate: input-required, delivered after the receiver's 503.
    headers, body = await delivered(posts)
    note = verified(headers, body, token, "hook1")
    assert note["task"]["id"] == task_id, note
    assert note["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", note
    assert headers["content-type"] == "application/a2a+json", headers
    await c.cancel_task(CancelTaskRequest(id=task_id))
    headers, body = await delivered(posts)
    note = verified(headers, body, token, "hook1")
    assert note["task"]["status"]["state"] == "TASK_STATE_CANCELED", note

    await c.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook1"))
    listed = await c.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=task_id))
    assert list(listed.configs) == [], listed
    await c.close()
    ok("push")
    return posts


def none_taken_twice(posts):
    """Two replicas send, one claims each state: no notification was taken twice (checked
    last, after the other checks, so that a second sender's retry had its time)."""
    taken = []
    while not posts.empty():
        status, _, body = posts.get_nowait()
        if status == 200:
            taken.append(json.loads(body)["task"]["status"]["state"])
    assert taken == [], taken
    ok("push once")


async def main():
    card = await card_check()
    task_id = await send_check()
    await stream_check()
    await gate_checks()
    posts = await push_checks()
    await v03_checks(card)
    await hostile_checks(task_id)
    none_taken_twice(posts)


asyncio.run(main())
