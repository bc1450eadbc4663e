"""Calling agents and workflows: the :class:`Mesh` handle and its :class:`Call`.

A call sends its ``message/send`` with ``Mesh-Status-To`` and resends it, byte for byte
(same task and message ids; signed afresh when signed), whenever it hears nothing for the
resend interval, until its timeout (docs/protocol.md, "Resending"). It takes the first final
reply whose id is its request's; status updates in between are its progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from . import protocol, subjects
from .artifacts import ArtifactStore, unguessable
from .errors import CallError, CallFailed, CallRefused, CallTimedOut, NoSuchAgent
from .reading import Failed, Output, Progress, progress_of, read_task
from .signing import CALLER, STATUS_TO, Signer, sign_request

DEFAULT_TIMEOUT = 60.0
DEFAULT_RESEND_INTERVAL = 3.0
DEFAULT_INPUT_THRESHOLD = 256 * 1024


class CallCanceled(CallFailed):
    """The callee answered that the call was canceled."""


class Mesh:
    """The caller's handle: calls, the catalog of cards, artifacts and steering, over one
    NATS connection. ``signer`` signs every request (starts, cancels, approvals);
    ``caller`` is the ``Mesh-Caller`` name that scopes task ids."""

    def __init__(
        self,
        nc: Client,
        *,
        namespace: str = subjects.DEFAULT_NAMESPACE,
        signer: Signer | None = None,
        caller: str | None = None,
    ) -> None:
        self.nc = nc
        self.ns = namespace
        self.signer = signer
        self.caller = caller
        self.artifacts = ArtifactStore(nc, namespace)

    @classmethod
    async def connect(
        cls,
        url: str = "nats://127.0.0.1:4222",
        *,
        namespace: str = subjects.DEFAULT_NAMESPACE,
        signer: Signer | None = None,
        caller: str | None = None,
        **options: Any,
    ) -> Mesh:
        """Connects to NATS (``options`` go to ``nats.connect``: user, nkeys, TLS, inbox
        prefix) and returns a handle that owns the connection."""
        nc = await nats.connect(url, **options)
        return cls(nc, namespace=namespace, signer=signer, caller=caller)

    async def close(self) -> None:
        """Drains and closes the connection."""
        await self.nc.drain()

    async def __aenter__(self) -> Mesh:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- calls --------------------------------------------------------------------------

    async def start(
        self,
        agent: str,
        input: Any = None,
        *,
        task_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        resend_interval: float = DEFAULT_RESEND_INTERVAL,
        instruction: str | None = None,
        artifact: str | None = None,
        headers: Mapping[str, str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        parts: list[Any] | None = None,
        input_threshold: int = DEFAULT_INPUT_THRESHOLD,
    ) -> Call:
        """Starts a call of ``agent`` (an agent or a workflow) with ``input`` (or the stored
        ``artifact``, a name or ``nats-object://`` URI; or exactly ``parts``); returns at
        once with a :class:`Call` whose progress and result follow."""
        tid = task_id or uuid.uuid4().hex + uuid.uuid4().hex[:8]
        if parts is None:
            parts = []
            if instruction:
                parts.append(protocol.text_part(instruction))
            if artifact is not None:
                name = protocol.parse_object_uri(artifact)
                parts.append(protocol.artifact_part(*(name or (self.artifacts.bucket, artifact))))
            else:
                encoded = protocol.encode(protocol.wrap(input)["data"])
                if len(encoded) > input_threshold:
                    obj = f"input/{tid}-{unguessable()}.json"
                    await self.artifacts.put_object(obj, protocol.encode(input))
                    parts.append(
                        protocol.artifact_part(
                            self.artifacts.bucket, obj, wrapped=not isinstance(input, dict)
                        )
                    )
                else:
                    parts.append(protocol.wrap(input))
        msg = protocol.message(
            "user", parts, message_id=tid, task_id=tid, context_id=tid, metadata=metadata
        )
        body = protocol.encode(protocol.send_request(tid, msg))
        h = dict(headers or {})
        if self.caller:
            h[CALLER] = self.caller
        call = Call(self, agent, tid, body, h, timeout, resend_interval)
        await call._begin()
        return call

    async def call(self, agent: str, input: Any = None, **options: Any) -> Any:
        """Calls ``agent`` and returns its output (stored outputs fetched); raises a
        :class:`~mesh.errors.CallError` when there is none. Options as :meth:`start`."""
        call = await self.start(agent, input, **options)
        return await call.result()

    def agent(self, name: str) -> AgentRef:
        """A reference to ``name`` to call: ``await mesh.agent("Doubler").call({...})``."""
        return AgentRef(self, name)

    # --- steering -----------------------------------------------------------------------

    async def request(
        self,
        agent: str,
        body: Mapping[str, Any],
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One JSON-RPC request to ``agent``'s request subject, signed when the handle has a
        signer; the JSON-RPC response."""
        subject = subjects.agent_request(self.ns, agent)
        payload = protocol.encode(body)
        h = dict(headers or {})
        if self.caller:
            h[CALLER] = self.caller
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        try:
            if self.signer is not None:
                h = sign_request(self.signer, subject, inbox, h, payload)
            await self.nc.publish(subject, payload, reply=inbox, headers=h or None)
            try:
                msg = await sub.next_msg(timeout=timeout)
            except asyncio.TimeoutError as e:
                raise CallTimedOut(f"{agent} did not answer within {timeout} s") from e
            if (msg.headers or {}).get("Status") == "503":
                raise NoSuchAgent(f"no agent {agent} is serving on the mesh")
            value = json.loads(msg.data)
            if not isinstance(value, dict):
                raise CallError(f"{agent} sent a reply that is not a JSON-RPC response")
            return value
        finally:
            await sub.unsubscribe()

    async def cancel(self, agent: str, task_id: str, reason: str | None = None) -> dict[str, Any]:
        """Sends ``tasks/cancel`` of ``task_id`` (a task id under this handle's caller name,
        or a run's execution id); raises :class:`CallRefused` when refused."""
        return _result(
            agent,
            await self.request(agent, protocol.cancel_request(uuid.uuid4().hex, task_id, reason)),
        )

    async def get_task(self, agent: str, task_id: str) -> dict[str, Any]:
        """``tasks/get``: the task as the callee knows it."""
        return _result(
            agent, await self.request(agent, protocol.get_request(uuid.uuid4().hex, task_id))
        )

    async def _control(self, workflow: str, data: dict[str, Any]) -> dict[str, Any]:
        mid = uuid.uuid4().hex
        msg = protocol.message("user", [protocol.data_part(data)], message_id=mid, task_id=mid)
        task = _result(workflow, await self.request(workflow, protocol.send_request(mid, msg)))
        found = read_task(task)
        if isinstance(found, Failed):
            raise CallFailed(found.message or "refused", kind=found.kind, state=found.state)
        return task

    async def approve(
        self, workflow: str, execution_id: str, node_id: str, comment: str | None = None
    ) -> dict[str, Any]:
        """Approves the waiting gate ``node_id`` of a run (signed: the handle needs a signer)."""
        return await self._decide(workflow, execution_id, node_id, "approve", comment)

    async def reject(
        self, workflow: str, execution_id: str, node_id: str, comment: str | None = None
    ) -> dict[str, Any]:
        """Rejects the waiting gate ``node_id`` of a run (signed)."""
        return await self._decide(workflow, execution_id, node_id, "reject", comment)

    async def _decide(
        self, workflow: str, execution_id: str, node_id: str, decision: str, comment: str | None
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "workflow_approval_decision",
            "execution_id": execution_id,
            "node_id": node_id,
            "decision": decision,
        }
        if comment is not None:
            data["comment"] = comment
        return await self._control(workflow, data)

    async def pause(
        self, workflow: str, execution_id: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Pauses a running run."""
        return await self._control(workflow, _control_part(execution_id, "pause", reason))

    async def resume(
        self, workflow: str, execution_id: str, reason: str | None = None
    ) -> dict[str, Any]:
        """Resumes a paused run."""
        return await self._control(workflow, _control_part(execution_id, "resume", reason))

    # --- the catalog --------------------------------------------------------------------

    async def catalog(self, **trust: Any) -> Any:
        """The cards on the mesh, kept up to date (see :class:`mesh.catalog.Catalog`)."""
        from .catalog import Catalog

        return await Catalog.open(self, **trust)


def _control_part(execution_id: str, action: str, reason: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "workflow_run_control",
        "execution_id": execution_id,
        "action": action,
    }
    if reason is not None:
        data["reason"] = reason
    return data


def _result(agent: str, response: dict[str, Any]) -> dict[str, Any]:
    error = response.get("error")
    if isinstance(error, dict):
        raise CallRefused(
            int(error.get("code", 0)), str(error.get("message", "")), error.get("data")
        )
    result = response.get("result")
    if not isinstance(result, dict):
        raise CallError(f"{agent} sent a reply without a result")
    return result


class AgentRef:
    """A name to call, from :meth:`Mesh.agent`."""

    def __init__(self, mesh: Mesh, name: str) -> None:
        self.mesh = mesh
        self.name = name

    async def call(self, input: Any = None, **options: Any) -> Any:
        """:meth:`Mesh.call` of this name."""
        return await self.mesh.call(self.name, input, **options)

    async def start(self, input: Any = None, **options: Any) -> Call:
        """:meth:`Mesh.start` of this name."""
        return await self.mesh.start(self.name, input, **options)


_END = object()


class Call:
    """One call in flight: iterate :meth:`progress`, await :meth:`result`, or
    :meth:`cancel` it. ``task_id`` names it (resends and ``tasks/get`` use it)."""

    def __init__(
        self,
        mesh: Mesh,
        agent: str,
        task_id: str,
        body: bytes,
        headers: dict[str, str],
        timeout: float,
        resend_interval: float,
    ) -> None:
        self.mesh = mesh
        self.agent = agent
        self.task_id = task_id
        self.sends = 0
        self._body = body
        self._headers = headers
        self._timeout = timeout
        self._resend = resend_interval
        self._events: asyncio.Queue[object] = asyncio.Queue()
        self._done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._last_run: dict[str, Any] | None = None

    async def _begin(self) -> None:
        nc = self.mesh.nc
        inbox = nc.new_inbox()
        self._reply = f"{inbox}.reply"
        self._status = f"{inbox}.status"
        self._inbox: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_msg(msg: Msg) -> None:
            self._inbox.put_nowait(msg)

        self._sub = await nc.subscribe(f"{inbox}.*", cb=on_msg)
        await self._send()
        self._task = asyncio.ensure_future(self._exchange())

    async def _send(self) -> None:
        subject = subjects.agent_request(self.mesh.ns, self.agent)
        headers = {**self._headers, STATUS_TO: self._status}
        if self.mesh.signer is not None:
            headers = sign_request(self.mesh.signer, subject, self._reply, headers, self._body)
        await self.mesh.nc.publish(subject, self._body, reply=self._reply, headers=headers)
        self.sends += 1

    async def _exchange(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        silent_until = loop.time() + self._resend
        alive = False
        try:
            while True:
                now = loop.time()
                if now >= deadline:
                    raise CallTimedOut(
                        f"agent {self.agent} did not answer in time "
                        f"(request sent {self.sends} times)"
                    )
                if now >= silent_until:
                    await self._send()
                    silent_until = now + self._resend
                    continue
                try:
                    msg = await asyncio.wait_for(
                        self._inbox.get(), min(deadline, silent_until) - now
                    )
                except asyncio.TimeoutError:
                    continue
                if (msg.headers or {}).get("Status") == "503":
                    if not alive:
                        raise NoSuchAgent(f"no agent {self.agent} is serving on the mesh")
                    continue  # every replica restarting: resend at the interval
                try:
                    value = json.loads(msg.data)
                except ValueError:
                    continue
                if not isinstance(value, dict) or value.get("id") != self.task_id:
                    continue
                result = value.get("result")
                if (
                    msg.subject == self._status
                    and isinstance(result, dict)
                    and result.get("kind") == "status-update"
                ):
                    alive = True
                    silent_until = loop.time() + self._resend
                    for event in progress_of(result):
                        if event.kind == "run_finished":
                            self._last_run = event.data
                        self._events.put_nowait(event)
                    continue
                if msg.subject != self._reply:
                    continue
                error = value.get("error")
                if isinstance(error, dict):
                    raise CallRefused(
                        int(error.get("code", 0)), str(error.get("message", "")), error.get("data")
                    )
                if isinstance(result, dict) and read_task(result) is not None:
                    self._done.set_result(result)
                    return
                if isinstance(result, dict):
                    alive = True
                    silent_until = loop.time() + self._resend
        except BaseException as e:
            if not self._done.done():
                self._done.set_exception(
                    e if isinstance(e, Exception) else CallError("the call was stopped")
                )
            if not isinstance(e, Exception):
                raise
        finally:
            self._events.put_nowait(_END)
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def progress(self) -> AsyncIterator[Progress]:
        """The call's progress events, until its final reply."""
        while True:
            event = await self._events.get()
            if event is _END:
                self._events.put_nowait(_END)
                return
            assert isinstance(event, Progress)
            yield event

    async def task(self) -> dict[str, Any]:
        """The final A2A Task."""
        return await asyncio.shield(self._done)

    async def result(self) -> Any:
        """The output (stored outputs fetched); raises a :class:`CallError` subclass."""
        found = read_task(await self.task())
        if isinstance(found, Output):
            if found.uri is None:
                return found.value
            return await self.mesh.artifacts.get_json(found.uri)
        assert isinstance(found, Failed)
        run = self._last_run or {}
        kwargs: dict[str, Any] = {
            "node": run.get("error_node_id"),
            "kind": found.kind,
            "state": found.state,
            "validation_errors": found.validation_errors,
        }
        if found.state == "canceled" or found.kind == protocol.KIND_CANCELED:
            raise CallCanceled(f"the call to {self.agent} was canceled", **kwargs)
        message = run.get("error_message") or found.message or "failed"
        raise CallFailed(f"{self.agent} failed: {message}", **kwargs)

    async def cancel(self, reason: str | None = None) -> dict[str, Any]:
        """Sends ``tasks/cancel`` of this call's task id."""
        return await self.mesh.cancel(self.agent, self.task_id, reason)

    async def close(self) -> None:
        """Stops listening (the callee is not told: see :meth:`cancel`)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
