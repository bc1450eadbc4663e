#!/usr/bin/env python3
"""Calls a workflow as a tool with the SDK (``pip install ./python``) and shows its
progress: finds it in the catalog of cards by a skill tag, prints its tool declaration
(as an OpenAI-style API would take it), checks the arguments against it, calls it and
prints each progress event as it comes.

    python3 examples/python/call_workflow_sdk.py --nats-url nats://127.0.0.1:4222 \\
        --tag words --arguments '{"text": "the quick brown fox"}'

Lines: ``tool: {declaration}``, one ``progress: ...`` per event, then ``output: JSON``.
Exit codes: 0 the output was printed, 1 no such workflow or bad arguments, 2 the call failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from mesh import CallError, InvalidArguments, Mesh
from mesh.cards import is_workflow


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--tag", required=True, help="a skill tag of the workflow's card")
    parser.add_argument("--arguments", required=True, help="the tool's arguments, as JSON")
    parser.add_argument("--discovery-timeout", type=float, default=5.0)
    args = parser.parse_args()
    async with await Mesh.connect(args.nats_url, caller="call_workflow_sdk") as mesh:
        catalog = await mesh.catalog()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.discovery_timeout
        found = []
        while not found and loop.time() < deadline:
            found = [c for c in catalog.with_tag(args.tag) if is_workflow(c)]
            if not found:
                await catalog.changed(deadline - loop.time())
        if not found:
            print(f"no workflow with the tag {args.tag!r}", file=sys.stderr)
            return 1
        tool = catalog.tool(found[0]["name"])
        assert tool is not None
        print(f"tool: {json.dumps(tool.openai())}")
        arguments = json.loads(args.arguments)
        try:
            tool.check(arguments)
        except InvalidArguments as e:
            print(f"bad arguments: {e}", file=sys.stderr)
            return 1
        call = await mesh.start(tool.name, arguments)
        async for event in call.progress():
            about = f" {event.node}" if event.node else ""
            said = event.text or (event.data or {}).get("text") or ""
            print(f"progress: {event.kind}{about} {said}".rstrip(), flush=True)
        try:
            output = await call.result()
        except CallError as e:
            print(f"{tool.name} failed: {e}", file=sys.stderr)
            return 2
        print(f"output: {json.dumps(output)}")
        return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
