"""The catalog: the cards on the mesh, kept up to date, as tools for LLMs too.

A catalog listens on the cards subject, pings for discovery when it opens, and keeps the
latest card of each name that :class:`~mesh.cards.CardTrust` admits (signed by the key
bound to its name, else the first key seen; unsigned only while allowed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from . import subjects
from .cards import CardTrust, is_workflow
from .errors import SignatureError
from .tools import Tool

if TYPE_CHECKING:
    from .client import Mesh

log = logging.getLogger("mesh.catalog")


class Catalog:
    """The cards on the mesh by name (see :meth:`Mesh.catalog`)."""

    def __init__(self, mesh: Mesh, trust: CardTrust) -> None:
        self.mesh = mesh
        self.trust = trust
        self._cards: dict[str, dict[str, Any]] = {}
        self._changed = asyncio.Condition()
        self._sub: Any = None
        self._warned: set[tuple[str, str]] = set()

    @classmethod
    async def open(
        cls, mesh: Mesh, *, agent_keys: dict[str, str] | None = None, require_signed: bool = False
    ) -> Catalog:
        """Subscribes, then pings so that every agent and workflow republishes its card."""
        catalog = cls(mesh, CardTrust(dict(agent_keys or {}), require_signed))
        catalog._sub = await mesh.nc.subscribe(subjects.agent_cards(mesh.ns), cb=catalog._on_card)
        await mesh.nc.flush()
        await mesh.nc.publish(subjects.discovery_ping(mesh.ns), b"{}")
        return catalog

    async def close(self) -> None:
        """Stops listening."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _on_card(self, msg: Msg) -> None:
        try:
            card = self.trust.admit(msg.data, msg.headers)
        except SignatureError as e:
            key = (str(e)[:80], (msg.headers or {}).get("Mesh-Signer", ""))
            if key not in self._warned:
                self._warned.add(key)
                log.warning("card ignored: %s", e)
            return
        async with self._changed:
            self._cards[card["name"]] = card
            self._changed.notify_all()

    def get(self, name: str) -> dict[str, Any] | None:
        """The card of ``name``, when known."""
        return self._cards.get(name)

    def cards(self) -> list[dict[str, Any]]:
        """Every card, by name."""
        return [self._cards[n] for n in sorted(self._cards)]

    def workflows(self) -> list[dict[str, Any]]:
        """The workflows' cards."""
        return [c for c in self.cards() if is_workflow(c)]

    def agents(self) -> list[dict[str, Any]]:
        """The agents' cards (not workflows)."""
        return [c for c in self.cards() if not is_workflow(c)]

    def with_tag(self, tag: str) -> list[dict[str, Any]]:
        """The cards with a skill tagged ``tag`` (case-insensitive)."""
        t = tag.lower()
        return [
            c
            for c in self.cards()
            if any(t == str(x).lower() for s in c.get("skills") or [] for x in s.get("tags") or [])
        ]

    async def wait_for(self, name: str, timeout: float) -> dict[str, Any] | None:
        """The card of ``name``, waiting up to ``timeout`` seconds for it."""
        async with self._changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(lambda: name in self._cards), timeout)
            return self._cards.get(name)

    async def changed(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for a card to come or change; whether one did."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), max(timeout, 0))
            except asyncio.TimeoutError:
                return False
            return True

    def tool(self, name: str) -> Tool | None:
        """The card of ``name`` as a tool to declare to an LLM."""
        card = self._cards.get(name)
        return Tool.from_card(card) if card is not None else None

    def tools(self) -> list[Tool]:
        """Every card as a tool."""
        return [Tool.from_card(c) for c in self.cards()]

    async def call_tool(self, name: str, arguments: Any, **options: Any) -> Any:
        """Checks an LLM's ``arguments`` against the tool's declared input, then calls it;
        raises :class:`~mesh.errors.InvalidArguments` before sending anything when they do
        not conform, and :class:`~mesh.errors.NoSuchAgent` for an unknown name."""
        from .errors import NoSuchAgent

        tool = self.tool(name)
        if tool is None:
            raise NoSuchAgent(f"no card of {name} on the mesh")
        tool.check(arguments)
        return await self.mesh.call(name, arguments, **options)
