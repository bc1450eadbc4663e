"""Drives the A2A door with the official a2a-sdk 0.3 client (0.3.26, its own venv):
discover by card, send, stream, get, resubscribe after dropping the stream, cancel, and a
push notification set with its `set_task_callback`. Prints `ok CHECK` for each check;
any failed assertion exits non-zero. Arguments: the server's base URL, an operator token."""

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
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    GetTaskPushNotificationConfigParams,
    Message,
    Part,
    PushNotificationConfig,
    Role,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TaskState,
    TaskStatusUpdateEvent,
    TextPart,
)

BASE, OPERATE = sys.argv[1], sys.argv[2]


def ok(check):
    print(f"ok {check}", flush=True)


def message(text):
    return Message(message_id=str(uuid.uuid4()), role=Role.user, parts=[Part(root=TextPart(text=text))])


async def client_for(name, streaming=True):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {OPERATE}"}, timeout=120.0)
    config = ClientConfig(streaming=streaming, httpx_client=http)
    return await ClientFactory.connect(f"{BASE}/a2a/{name}", client_config=config)


def receiver():
    posts = queue.Queue()

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            posts.put(({k.lower(): v for k, v in self.headers.items()}, body))

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/hook", posts


async def main():
    c = await client_for("Greet", streaming=False)
    card = await c.get_card()
    assert card.capabilities.streaming and card.capabilities.push_notifications, card
    ok("v0.3 card")
    events = [e async for e in c.send_message(message("hello"))]
    task, _ = events[-1]
    assert task.status.state == TaskState.completed, task
    assert task.artifacts[0].parts[0].root.data == {"said": "hello"}, task
    ok("v0.3 send")
    got = await c.get_task(TaskQueryParams(id=task.id))
    assert got.status.state == TaskState.completed, got
    ok("v0.3 get")

    s = await client_for("Greet")
    events = [e async for e in s.send_message(message("streamed"))]
    updates = [u for _, u in events if isinstance(u, TaskStatusUpdateEvent)]
    assert updates and updates[-1].final and updates[-1].status.state == TaskState.completed, events
    assert "thinking about it" in json.dumps([u.model_dump(mode="json") for u in updates]), updates
    ok("v0.3 stream")

    g = await client_for("Gate")
    url, posts = receiver()
    stream = g.send_message(message("wait"))
    task, _ = await stream.__anext__()
    await stream.aclose()
    token = "tok-" + uuid.uuid4().hex
    config = PushNotificationConfig(id="h03", url=url, token=token)
    await g.set_task_callback(TaskPushNotificationConfig(task_id=task.id, push_notification_config=config))
    kept = await g.get_task_callback(GetTaskPushNotificationConfigParams(id=task.id, push_notification_config_id="h03"))
    assert kept.push_notification_config.url == url, kept
    headers, body = await asyncio.to_thread(posts.get, True, 120)
    at = headers["mesh-push-timestamp"]
    mac = hmac.new(token.encode(), f"a2a-push-v1\n{at}\nh03\n".encode() + body, hashlib.sha256)
    assert headers["mesh-push-signature"] == "v1=" + mac.hexdigest(), headers
    note = json.loads(body)
    assert note["kind"] == "task" and note["status"]["state"] == "input-required", note
    ok("v0.3 push")
    sub = g.resubscribe(TaskIdParams(id=task.id))
    now, _ = await sub.__anext__()
    assert now.id == task.id, now
    cancelled = await g.cancel_task(TaskIdParams(id=task.id))
    assert cancelled.status.state == TaskState.canceled, cancelled
    last = None
    async for _, update in sub:
        last = update
    assert isinstance(last, TaskStatusUpdateEvent) and last.final, last
    assert last.status.state == TaskState.canceled, last
    ok("v0.3 resubscribe and cancel")


asyncio.run(main())
