#!/usr/bin/env python3
"""A Python agent on the mesh, written with the SDK (``pip install ./python``): ``WordStats``
counts the words of a text, tells its caller how far it got, and fails with a kind of its
own on an empty text. ``examples/python/word_count.yaml`` calls it from a workflow.

    python3 examples/python/word_stats_agent.py --nats-url nats://127.0.0.1:4222

Prints ``ready`` once serving; ctrl-c or SIGTERM drains (running calls answer first).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import nats
from mesh import Context, HandlerError, agent, run, skill


@agent(
    name="WordStats",
    description="Counts the words of a text.",
    skills=[skill("count", "Count words", "counts a text's words", tags=["words", "text"])],
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
    output_schema={
        "type": "object",
        "properties": {"words": {"type": "integer"}, "longest": {"type": "string"}},
        "required": ["words"],
    },
)
async def word_stats(input: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """The handler: the input was checked against the schema before it is called."""
    words = input["text"].split()
    if not words:
        raise HandlerError("there is no word to count", kind="empty_text")
    await ctx.send_status(f"counting {len(words)} words")
    return {"words": len(words), "longest": max(words, key=len)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    args = parser.parse_args()
    nc = await nats.connect(args.nats_url)
    await run([word_stats], nc, on_ready=lambda: print("ready", flush=True))
    await nc.drain()


if __name__ == "__main__":
    asyncio.run(main())
