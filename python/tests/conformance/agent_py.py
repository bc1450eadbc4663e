"""The conformance suite's agent written with the Python SDK: the same contract as
agent-sdk's ``conformance-agent`` binary (see that file's opening): ``double``,
``status``, ``big``, ``fail`` and ``gate`` chosen by the input's ``op``.

    python agent_py.py --nats-url URL --name NAME [--heartbeat-ms MS] [--nkey-seed-file F]

Prints ``ready`` once serving and ``draining`` on SIGTERM (running calls then finish).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from typing import Any

import nats

from mesh import Agent, Context, HandlerError, Signer, run, skill

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "op": {"type": "string", "enum": ["double", "status", "big", "fail", "gate"]},
        "value": {"type": "number"},
        "text": {"type": "string"},
        "kind": {"type": "string"},
        "size": {"type": "integer", "minimum": 0, "maximum": 16_777_216},
    },
    "required": ["op"],
}


class Conformance(Agent):
    """The agent: one behaviour per ``op``."""

    def __init__(
        self, nc: Any, name: str, heartbeat: float, signer: Signer | None, namespace: str
    ) -> None:
        super().__init__(
            name,
            description="The SDK conformance suite's agent (Python SDK)",
            skills=[skill("conformance", "Conformance", "what the suite drives")],
            input_schema=INPUT_SCHEMA,
            output_schema={"type": "object"},
            heartbeat_interval=heartbeat,
            signer=signer,
            namespace=namespace,
        )
        self.nc = nc
        self.runs: Counter[str] = Counter()

    async def handle(self, input: Any, ctx: Context) -> Any:
        op, text, value = input["op"], input.get("text", ""), input.get("value", 0)
        if op == "double":
            return {"value": float(value) * 2}
        if op == "status":
            await ctx.send_status(text)
            return {"said": text}
        if op == "big":
            return {"blob": "x" * input.get("size", 0)}
        if op == "fail":
            raise HandlerError(text, input.get("kind", "conformance"))
        if op == "gate":
            self.runs[text] += 1
            n = self.runs[text]
            released: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def release(_msg: Any) -> None:
                if not released.done():
                    released.set_result(None)

            sub = await self.nc.subscribe(f"conformance.release.{text}", cb=release)
            try:
                # Written after the subscription on one connection: the server knows it
                # by the time the test reads this update.
                await ctx.send_status(f"gate {text} open")
                await released
            finally:
                await sub.unsubscribe()
            return {"runs": n, "value": float(value)}
        raise HandlerError(f"unknown op {op}")


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--nats-url", required=True)
    p.add_argument("--name", default="Conformance")
    p.add_argument("--heartbeat-ms", type=int, default=1000)
    p.add_argument("--nkey-seed-file")
    p.add_argument("--namespace", default="mesh")
    a = p.parse_args()
    nc = await nats.connect(a.nats_url)
    signer = Signer.from_seed_file(a.nkey_seed_file) if a.nkey_seed_file else None
    agent = Conformance(nc, a.name, a.heartbeat_ms / 1000, signer, a.namespace)
    await run(
        [agent],
        nc,
        on_ready=lambda: print("ready", flush=True),
        on_stop=lambda: print("draining", flush=True),
    )
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
