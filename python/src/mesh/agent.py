"""Serving agents (docs/protocol.md), at parity with agent-sdk: the card at start, every
card interval and on a discovery ping; requests in a queue group; input read (wrapped
values, object-store files) and validated before the handler, output validated after and
stored when large; one run per task id (copies share it, recent ones get the same answer);
heartbeats while working; status updates from the handler; cancel; ``tasks/get``;
malformed requests answered with a JSON-RPC error; reply subjects checked; a clean stop.

Simple agents are a decorated function (:func:`agent`); the rest subclass :class:`Agent`
and override :meth:`Agent.handle`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from . import proof, protocol, subjects
from .artifacts import ArtifactStore, unguessable
from .cards import agent_card
from .dedup import DEFAULT_CAPACITY, DEFAULT_WINDOW, Answered, Calls, Joined, Run
from .errors import ArtifactError, ServeError
from .protocol import Call, Canceled, Failure, InputArtifact, InputInline, Outcome, Success
from .schema import Schema, counted
from .signing import Signer, sign_card

log = logging.getLogger("mesh.agent")

DEFAULT_CARD_INTERVAL = 10.0
DEFAULT_HEARTBEAT_INTERVAL = 1.0
DEFAULT_ARTIFACT_THRESHOLD = 256 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
PING_ANSWER_GAP = 1.0


class HandlerError(Exception):
    """Raised by a handler to fail the call with ``message`` and an error ``kind`` (which a
    workflow matches against a node's ``non_retryable_errors``)."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


@dataclass
class Context:
    """What a handler knows of its call besides the input, and how it talks back."""

    agent: str
    task_id: str
    context_id: str
    message_id: str
    instruction: str | None
    workflow: protocol.WorkflowCall | None
    headers: dict[str, str]
    _status: Callable[[list[Any]], Awaitable[bool]] | None = field(default=None, repr=False)

    async def send_status(self, text: str) -> bool:
        """Tells the caller how the call is going: a ``working`` update with ``text``
        (a workflow node forwards it to the run's callers). ``False`` when the caller asked
        for no updates."""
        return await self.send_status_parts([protocol.text_part(text)])

    async def send_status_parts(self, parts: list[Any]) -> bool:
        """:meth:`send_status` with any parts (a DataPart with structured progress, say)."""
        if self._status is None:
            return False
        return await self._status(parts)

    def onward_headers(self) -> dict[str, str]:
        """Headers for calls this handler makes: the trace context, ``Mesh-Call-Depth`` + 1
        and ``Mesh-Caller`` = this agent."""
        out = protocol.trace_context(self.headers)
        depth = self.headers.get("Mesh-Call-Depth", "0").strip()
        out["Mesh-Call-Depth"] = str((int(depth) if depth.isdigit() else 0) + 1)
        out["Mesh-Caller"] = self.agent
        return out


Handler = Callable[[Any, Context], Awaitable[Any]]
"""``async def handle(input, ctx) -> output``."""


class Agent:
    """An agent: a name, a card and a handler. Subclass and override :meth:`handle`, or
    pass ``handler`` (what :func:`agent` does)."""

    def __init__(
        self,
        name: str,
        handler: Handler | None = None,
        *,
        description: str = "",
        version: str = "0.1.0",
        skills: list[dict[str, Any]] | None = None,
        input_schema: Any = None,
        output_schema: Any = None,
        namespace: str = subjects.DEFAULT_NAMESPACE,
        card_interval: float = DEFAULT_CARD_INTERVAL,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        artifact_threshold: int = DEFAULT_ARTIFACT_THRESHOLD,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        dedup_capacity: int = DEFAULT_CAPACITY,
        dedup_window: float = DEFAULT_WINDOW,
        signer: Signer | None = None,
    ) -> None:
        if not name or any(not (c.isalnum() or c in "_-") or not c.isascii() for c in name):
            raise ServeError(f"{name!r} is not a valid agent name: use A-Z a-z 0-9 _ -")
        self.name = name
        self._handler = handler
        self.description = description or f"Agent {name}"
        self.version = version
        self.skills = skills or []
        try:
            self.input_schema = Schema(input_schema) if input_schema is not None else None
            self.output_schema = Schema(output_schema) if output_schema is not None else None
        except ValueError as e:
            raise ServeError(f"agent {name}: {e}") from e
        self.namespace = namespace
        self.card_interval = card_interval
        self.heartbeat_interval = heartbeat_interval
        self.artifact_threshold = artifact_threshold
        self.max_in_flight = max_in_flight
        self.dedup_capacity = dedup_capacity
        self.dedup_window = dedup_window
        self.signer = signer

    async def handle(self, input: Any, ctx: Context) -> Any:
        """Answers one call: the output, or raise :class:`HandlerError`."""
        if self._handler is None:
            raise ServeError(f"agent {self.name} has no handler: pass one or override handle")
        return await self._handler(input, ctx)

    def card(self) -> dict[str, Any]:
        """The card this agent publishes."""
        return agent_card(
            self.name,
            self.description,
            self.namespace,
            version=self.version,
            skills=self.skills,
            input_schema=self.input_schema.source if self.input_schema else None,
            output_schema=self.output_schema.source if self.output_schema else None,
        )

    async def serve(self, nc: Client) -> Serving:
        """Starts serving on ``nc``; returns once the server has taken the subscriptions,
        so requests sent after this are answered."""
        serving = Serving(self, nc)
        await serving.start()
        return serving


def agent(name: str, **options: Any) -> Callable[[Handler], Agent]:
    """Declares a simple agent from an async function ``(input, ctx) -> output``::

        @agent(name="Doubler", input_schema={"type": "object"})
        async def doubler(input, ctx):
            return {"value": input["value"] * 2}

    The options are :class:`Agent`'s."""

    def wrap(fn: Handler) -> Agent:
        return Agent(name, fn, **options)

    return wrap


class Serving:
    """A serving agent: :meth:`stop` stops taking requests and waits for running calls."""

    def __init__(self, agent: Agent, nc: Client) -> None:
        self.agent = agent
        self.nc = nc
        self.ns = agent.namespace
        self.calls = Calls(agent.dedup_capacity, agent.dedup_window)
        self.artifacts = ArtifactStore(nc, self.ns)
        self._slots = asyncio.Semaphore(agent.max_in_flight)
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._card_bytes = protocol.encode(agent.card())
        self._last_ping_answer = 0.0
        self._ping_owed = False
        self._stopped = asyncio.Event()
        self.ready = False

    async def start(self) -> None:
        """Subscribes, publishes the card, and waits for the server to take it all."""
        name, ns = self.agent.name, self.ns
        try:
            self._subs = [
                await self.nc.subscribe(
                    subjects.agent_request(ns, name), queue=name, cb=self._on_request
                ),
                await self.nc.subscribe(subjects.agent_cancel(ns, name), cb=self._on_cancel),
                await self.nc.subscribe(subjects.discovery_ping(ns), cb=self._on_ping),
            ]
            await self._publish_card()
            await self.nc.flush()
        except Exception as e:
            raise ServeError(f"agent {name} cannot subscribe: {e}") from e
        self._spawn(self._card_ticker())
        self.ready = True

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        """Unsubscribes (queue peers take new requests), then waits for running calls."""
        self.ready = False
        self._stopped.set()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs = []
        pending = [t for t in self._tasks if not t.done()]
        for t in pending:
            if getattr(t, "_mesh_ticker", False):
                t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # --- cards --------------------------------------------------------------------------

    async def _publish_card(self) -> None:
        headers = (
            sign_card(self.agent.signer, self.agent.name, self._card_bytes)
            if self.agent.signer
            else None
        )
        try:
            await self.nc.publish(subjects.agent_cards(self.ns), self._card_bytes, headers=headers)
        except Exception as e:
            log.warning("agent %s cannot publish its card: %s", self.agent.name, e)

    async def _card_ticker(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            task._mesh_ticker = True  # type: ignore[attr-defined]
        with contextlib.suppress(asyncio.CancelledError):
            while not self._stopped.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), self.agent.card_interval)
                if not self._stopped.is_set():
                    await self._publish_card()

    async def _on_ping(self, _msg: Msg) -> None:
        # Pings cost a card per agent: at most one answer per gap, the rest owed to its end.
        now = time.monotonic()
        if now - self._last_ping_answer >= PING_ANSWER_GAP:
            self._last_ping_answer = now
            await self._publish_card()
        elif not self._ping_owed:
            self._ping_owed = True

            async def owed() -> None:
                await asyncio.sleep(self._last_ping_answer + PING_ANSWER_GAP - time.monotonic())
                self._ping_owed = False
                self._last_ping_answer = time.monotonic()
                await self._publish_card()

            t = self._spawn(owed())
            t._mesh_ticker = True  # type: ignore[attr-defined]

    # --- publishing ---------------------------------------------------------------------

    async def _publish(
        self, subject: str, headers: dict[str, str], body: Any, token: str | None
    ) -> None:
        """Publishes a reply or status update, never to a subject a requester may not make
        an agent publish to; proven with the call's token when it has one."""
        why = subjects.check_reply(self.ns, subject)
        if why is not None:
            log.warning("agent %s not answering on %s: %s", self.agent.name, subject[:64], why)
            return
        data = protocol.encode(body)
        if token is not None:
            headers = {**headers, proof.CALL_MAC: proof.mac(token, subject, data)}
        try:
            await self.nc.publish(subject, data, headers=headers or None)
        except Exception as e:
            log.warning("agent %s cannot publish a reply: %s", self.agent.name, e)

    async def _send_status(self, call: Call, state: str, parts: list[Any] | None = None) -> bool:
        if call.status_to is None:
            return False
        update = protocol.status_update(call, state, parts)
        await self._publish(
            call.status_to, protocol.trace_context(call.headers), update, call.token
        )
        return True

    async def _answer(self, call: Call, outcome: Outcome) -> None:
        if call.reply_to is None:
            return
        await self._publish(
            call.reply_to, call.reply_headers(), protocol.reply(call, outcome), call.token
        )

    # --- requests -----------------------------------------------------------------------

    @staticmethod
    def _headers(msg: Msg) -> dict[str, str]:
        return dict(msg.headers or {})

    def _screen(self, msg: Msg, headers: dict[str, str]) -> tuple[str, str | None] | None:
        """A refusal of where the request asks to be answered (and where the refusal may
        go), or of a mesh header; ``None`` when it passes."""
        reply = msg.reply or None
        asked = [reply, headers.get("Mesh-Reply-To"), headers.get("Mesh-Status-To")]
        for subject in asked:
            if subject is None:
                continue
            why = subjects.check_reply(self.ns, subject)
            if why is not None:
                shown = (
                    subject if len(subject) <= 64 else subject[:64] + f"… ({len(subject)} bytes)"
                )
                answer_to = (
                    reply if reply and subjects.check_reply(self.ns, reply) is None else None
                )
                return f"reply subject {shown!r} is refused: {why}", answer_to
        for name in (
            "Mesh-Caller",
            "Mesh-Call-Depth",
            "Mesh-Signer",
            "Mesh-Signed-At",
            "Mesh-Signature",
        ):
            value = headers.get(name)
            if value is None:
                continue
            if len(value.encode()) > 512:
                return f"header {name} is refused: its value is over the limit of 512 bytes", reply
            if any(not c.isprintable() for c in value):
                return f"header {name} is refused: its value holds a control character", reply
        return None

    async def _on_request(self, msg: Msg) -> None:
        headers = self._headers(msg)
        refusal = self._screen(msg, headers)
        if refusal is not None:
            text, to = refusal
            log.warning("agent %s refusing a request: %s", self.agent.name, text)
            if to is not None:
                decoded = protocol.decode(msg.data, {}, None)
                rid = getattr(decoded, "id", None)
                await self._publish(
                    to, {}, protocol.error_response(rid, protocol.INVALID_PARAMS, text), None
                )
            return
        decoded = protocol.decode(msg.data, headers, msg.reply or None)
        if isinstance(decoded, Call):
            self._on_send(decoded)
        elif isinstance(decoded, protocol.Cancel):
            found = self.calls.cancel(decoded.task_id, self._proven_by(msg))
            if decoded.reply_to:
                await self._publish(
                    decoded.reply_to,
                    protocol.trace_context(headers),
                    protocol.cancel_answer(decoded.id, decoded.task_id, found),
                    None,
                )
        elif isinstance(decoded, protocol.Get):
            known = self.calls.known(decoded.task_id, time.monotonic())
            if decoded.reply_to:
                await self._publish(
                    decoded.reply_to,
                    protocol.trace_context(headers),
                    protocol.get_answer(decoded.id, decoded.task_id, known),
                    None,
                )
        elif decoded.reply_to:
            rid = decoded.response.get("id")
            h = {protocol.MSG_ID: protocol.id_text(rid)} if rid is not None else {}
            await self._publish(
                decoded.reply_to, {**h, **protocol.trace_context(headers)}, decoded.response, None
            )

    def _on_send(self, call: Call) -> None:
        # Registered before any await, so a cancel or a copy that follows finds it.
        admission = self.calls.admit(call, time.monotonic())
        if isinstance(admission, Run):
            task = self._spawn(self._run_call(call))
            self.calls.attach(call.dedup_key, task)
        elif isinstance(admission, Answered):
            self._spawn(self._answer(call, admission.outcome))
        elif isinstance(admission, Joined):
            # A sign of life for a caller that resent because it heard nothing.
            state = "working" if admission.started else "submitted"
            self._spawn(self._status_only(call, state))

    async def _status_only(self, call: Call, state: str) -> None:
        await self._send_status(call, state)

    async def _on_cancel(self, msg: Msg) -> None:
        decoded = protocol.decode(msg.data, self._headers(msg), msg.reply or None)
        if not isinstance(decoded, protocol.Cancel):
            return
        if self.calls.cancel(decoded.task_id, self._proven_by(msg)) and decoded.reply_to:
            await self._publish(
                decoded.reply_to,
                {},
                protocol.cancel_answer(decoded.id, decoded.task_id, True),
                None,
            )

    @staticmethod
    def _proven_by(msg: Msg) -> Callable[[str], bool]:
        given = (msg.headers or {}).get(proof.CALL_MAC)
        return lambda token: given is not None and proof.verify(token, msg.subject, msg.data, given)

    # --- one call -----------------------------------------------------------------------

    async def _run_call(self, call: Call) -> None:
        outcome: Outcome
        try:
            async with self._slots:
                self.calls.started(call.dedup_key)
                # A workflow's call gets no bare `working` at once: the node drops it.
                if call.node_request is None:
                    await self._send_status(call, "working")
                work = asyncio.ensure_future(self._process(call))
                beat = asyncio.ensure_future(self._heartbeats(call))
                try:
                    outcome = await asyncio.shield(work)
                except asyncio.CancelledError:
                    work.cancel()
                    with contextlib.suppress(BaseException):
                        await work
                    outcome = Canceled()
                finally:
                    beat.cancel()
        except asyncio.CancelledError:
            outcome = Canceled()
        waiters = self.calls.finish(call.dedup_key, outcome, time.monotonic())
        await self._answer(call, outcome)
        for waiter in waiters:
            await self._answer(waiter, outcome)

    async def _heartbeats(self, call: Call) -> None:
        if call.status_to is None:
            return
        while True:
            await asyncio.sleep(self.agent.heartbeat_interval)
            await self._send_status(call, "working")

    async def _process(self, call: Call) -> Outcome:
        source = call.input
        if isinstance(source, InputInline):
            value = source.value
        elif isinstance(source, InputArtifact):
            parsed = protocol.parse_object_uri(source.uri)
            if parsed is None or parsed[0] != self.artifacts.bucket:
                return Failure(
                    f"the input artifact '{source.uri}' is not in the mesh's artifact bucket "
                    f"'{self.artifacts.bucket}': an agent reads inputs only from there"
                )
            try:
                value = await self.artifacts.get_json(parsed[1])
            except ArtifactError as e:
                return Failure(f"cannot read the input: {e}")
            if source.wrapped:
                value = value.get("value") if isinstance(value, dict) else None
        else:
            return Failure(source.why)
        requested_in = requested_out = None
        nr = call.node_request or {}
        try:
            if nr.get("input_schema") is not None:
                requested_in = Schema(nr["input_schema"])
        except ValueError as e:
            return Failure(f"the request's input_schema is invalid: {e}")
        try:
            if nr.get("output_schema") is not None:
                requested_out = Schema(nr["output_schema"])
        except ValueError as e:
            return Failure(f"the request's output_schema is invalid: {e}")
        refusal = _conform("input", self.agent.input_schema, requested_in, value)
        if refusal is not None:
            return refusal
        ctx = Context(
            agent=self.agent.name,
            task_id=call.task_id,
            context_id=call.context_id,
            message_id=call.message_id,
            instruction=call.instruction,
            workflow=call.workflow,
            headers=call.headers,
            _status=(lambda parts: self._send_status(call, "working", parts))
            if call.status_to
            else None,
        )
        try:
            output = await self.agent.handle(value, ctx)
        except HandlerError as e:
            return Failure(e.message, e.kind)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("agent %s: the handler raised", self.agent.name)
            return Failure(f"the agent's handler raised {type(e).__name__}: {e}")
        refusal = _conform("output", self.agent.output_schema, requested_out, output)
        if refusal is not None:
            return refusal
        return await self._store_output(call, output)

    async def _store_output(self, call: Call, output: Any) -> Outcome:
        try:
            data = protocol.encode(output)
        except (TypeError, ValueError) as e:
            return Failure(f"the output is not JSON: {e}")
        if len(data) <= self.agent.artifact_threshold:
            return Success(output)
        file = (call.node_request or {}).get("suggested_output_filename") or "output.json"
        name = f"{call.task_id}/{unguessable()}/{file}"
        try:
            await self.artifacts.put_object(name, data)
        except ArtifactError as e:
            return Failure(f"cannot store the output: {e}")
        return Success(bucket=self.artifacts.bucket, artifact=name)


def _conform(what: str, own: Schema | None, requested: Schema | None, value: Any) -> Failure | None:
    """The agent's schema, then the request's: the first with violations refuses."""
    kind = protocol.KIND_INPUT_VALIDATION if what == "input" else protocol.KIND_OUTPUT_VALIDATION
    for schema, whose in ((own, "the agent's"), (requested, "the request's")):
        if schema is None:
            continue
        schema.apply_defaults(value)
        violations = schema.violations(what, value)
        if violations:
            return Failure(
                f"the {what} does not match {whose} {what} schema ({counted(violations)})",
                kind,
                violations,
            )
    return None


async def run(
    agents: list[Agent],
    nc: Client,
    *,
    on_ready: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> None:
    """Serves ``agents`` on ``nc`` until SIGINT or SIGTERM, then drains: stops taking
    requests and lets running calls answer. ``on_ready`` is called once every agent
    serves, ``on_stop`` when the signal comes."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    servings = [await a.serve(nc) for a in agents]
    if on_ready is not None:
        on_ready()
    try:
        await stop.wait()
        if on_stop is not None:
            on_stop()
    finally:
        await asyncio.gather(*(s.stop() for s in servings))
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
