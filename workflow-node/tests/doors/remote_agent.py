"""A remote agent served by the official A2A SDK's server side (a2a-sdk 1.3.0, protocol 1.0
with the 0.3 compatibility layer on), on loopback, for a workflow to call: `Shouter` answers
with its input's text in capitals, fails when asked to, and waits (until cancelled) when
asked to. It prints `ready PORT` on stdout once serving, and each cancel it receives as
`cancelled TASK`; a request's `Authorization` header must be `Bearer $REMOTE_TOKEN`. With
REMOTE_TLS_CERT and REMOTE_TLS_KEY (PEM files) it serves https with that certificate, as
uvicorn serves any deployment's.

Usage: remote_agent.py  (REMOTE_TOKEN, and REMOTE_TLS_CERT/REMOTE_TLS_KEY for https, in the
environment)
"""

import asyncio
import json
import os
import socket
import sys

import uvicorn
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse
from google.protobuf.json_format import MessageToDict

TOKEN = os.environ["REMOTE_TOKEN"]


def say(line):
    print(line, flush=True)


def input_of(context):
    """The request's input: its first data part, else its text."""
    for part in context.message.parts:
        if part.HasField("data"):
            return MessageToDict(part.data)
    return {"text": context.get_user_input()}


class Shouter(AgentExecutor):
    async def execute(self, context, event_queue):
        if context.current_task is None:
            submitted = TaskState.TASK_STATE_SUBMITTED
            task = new_task(context.task_id, context.context_id, submitted, history=[context.message])
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        data = input_of(context)
        # The node's input arrives wrapped ({"mesh_wrapped": ...}) when it is not an object.
        text = str(data.get("text", ""))
        if text == "fail":
            await updater.failed(updater.new_agent_message([Part(text="asked to fail")]))
            return
        if text == "wait":
            say(f"waiting {context.task_id}")
            await asyncio.Event().wait()  # until cancelled
        await updater.add_artifact([Part(data=_struct({"shouted": text.upper()}))], name="out")
        await updater.complete()

    async def cancel(self, context, event_queue):
        say(f"cancelled {context.task_id}")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def _struct(value):
    from google.protobuf.struct_pb2 import Value

    v = Value()
    v.struct_value.update(value)
    return v


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if request.url.path.startswith("/.well-known/"):
            return await call_next(request)
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        tp = request.headers.get("traceparent")
        if tp:
            say(f"traceparent {tp}")
        return await call_next(request)


def main():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Listening before saying so: a connection made at once waits in the backlog.
    sock.listen(64)
    port = sock.getsockname()[1]
    cert, key = os.environ.get("REMOTE_TLS_CERT"), os.environ.get("REMOTE_TLS_KEY")
    scheme = "https" if cert else "http"
    url = f"{scheme}://127.0.0.1:{port}/"
    card = AgentCard(
        name="Shouter",
        description="answers in capitals",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="shout", name="Shout", description="capitals", tags=["loud"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Shouter(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, "/", enable_v0_3_compat=True
    )
    app = Starlette(routes=routes)
    app.add_middleware(Bearer)
    config = uvicorn.Config(app, log_level="warning", ssl_certfile=cert, ssl_keyfile=key)
    server = uvicorn.Server(config)
    say(f"ready {port}")
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    try:
        main()
    except BaseException as e:  # noqa: BLE001
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        raise
