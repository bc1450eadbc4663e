"""The suite's raw driver: requests built byte by byte as docs/protocol.md writes them,
and inboxes that collect what comes back, so a scenario checks the wire, not an SDK's
reading of it."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from mesh import protocol


@dataclass
class Inbox:
    """A subscription that keeps every message it gets."""

    subject: str
    messages: list[Any] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    sub: Any = None

    @classmethod
    async def open(cls, nc: Any, subject: str | None = None) -> Inbox:
        inbox = cls(subject or nc.new_inbox())

        async def keep(msg: Any) -> None:
            inbox.messages.append(msg)
            inbox._arrived.set()

        inbox.sub = await nc.subscribe(inbox.subject, cb=keep)
        await nc.flush()
        return inbox

    async def wait(self, pred: Any, timeout: float = 20, after: int = 0) -> Any:
        """The first message from position ``after`` on for which ``pred(json, msg)``
        holds: its decoded JSON and the message."""

        async def first() -> Any:
            seen = after
            while True:
                for msg in self.messages[seen:]:
                    seen += 1
                    value = json.loads(msg.data) if msg.data else None
                    if pred(value, msg):
                        return value, msg
                self._arrived.clear()
                if seen == len(self.messages):
                    await self._arrived.wait()

        return await asyncio.wait_for(first(), timeout)

    def decoded(self) -> list[Any]:
        return [json.loads(m.data) for m in self.messages if m.data]

    async def close(self) -> None:
        await self.sub.unsubscribe()


def send_body(
    input: Any, *, task_id: str | None = None, node_request: dict[str, Any] | None = None
) -> tuple[str, bytes]:
    """A ``message/send`` body (plain, or a workflow's when ``node_request`` is given)."""
    tid = task_id or uuid.uuid4().hex
    parts: list[Any] = []
    if node_request is not None:
        parts.append(protocol.data_part(node_request))
    parts.append(protocol.wrap(input))
    msg = protocol.message("user", parts, message_id=tid, task_id=tid, context_id=tid)
    return tid, protocol.encode(protocol.send_request(tid, msg))


def is_final(value: Any, _msg: Any) -> bool:
    return isinstance(value, dict) and (
        "error" in value or (value.get("result") or {}).get("kind") == "task"
    )


def says(text: str) -> Any:
    def pred(value: Any, _msg: Any) -> bool:
        msg = ((value or {}).get("result") or {}).get("status", {}).get("message") or {}
        return protocol.texts(msg.get("parts") or []) == text

    return pred


def bare_working(value: Any, _msg: Any) -> bool:
    status = ((value or {}).get("result") or {}).get("status") or {}
    return status.get("state") == "working" and "message" not in status
