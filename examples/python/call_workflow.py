#!/usr/bin/env python3
"""Calls a workflow on the mesh from Python, with nothing but nats-py and JSON.

This is the no-dependency example, kept to show the wire protocol by hand; with the Python
SDK (``pip install ./python``, see python/README.md) the same takes a few lines:
``examples/python/call_workflow_sdk.py``.

It finds the workflow by its agent card (a discovery ping on
`{ns}.a2a.v1.discovery.ping` makes every agent and workflow republish its card on
`{ns}.a2a.v1.discovery.agentcards`), then sends a plain JSON-RPC `message/send` on the
workflow's request subject `{ns}.a2a.v1.agent.request.{name}` and prints the output
(see docs/protocol.md).

    python3 -m pip install 'nats-py==2.16.0'
    python3 examples/python/call_workflow.py --nats-url nats://127.0.0.1:4222 \
        --tag double --input '{"value": 21}'

Exit codes: 0 the output was printed (last line: `output: JSON`), 1 bad usage or no
such workflow, 2 the call failed or timed out.
"""

import argparse
import asyncio
import json
import os
import sys
import uuid

try:
    import nats
    from nats.errors import TimeoutError as NatsTimeout
except ImportError:
    sys.exit(
        "call_workflow.py needs the nats-py module: python3 -m pip install 'nats-py==2.16.0'"
    )

AGENT_TYPE = "https://solace.com/a2a/extensions/agent-type"
SCHEMAS = "https://solace.com/a2a/extensions/sam/schemas"
FINAL_STATES = {"completed", "failed", "canceled", "rejected"}


def extension(card, uri):
    """The params of the card's extension `uri` ({} when absent)."""
    for ext in card.get("capabilities", {}).get("extensions") or []:
        if ext.get("uri") == uri:
            return ext.get("params") or {}
    return {}


def is_workflow(card):
    return extension(card, AGENT_TYPE).get("type") == "workflow"


def fits(card, name, tag):
    if not is_workflow(card):
        return False
    if name is not None:
        return card.get("name") == name
    tags = {t.lower() for s in card.get("skills") or [] for t in s.get("tags") or []}
    return tag.lower() in tags


async def discover(nc, ns, name, tag, timeout):
    """The first workflow card that fits, or None after `timeout` seconds."""
    cards = await nc.subscribe(f"{ns}.a2a.v1.discovery.agentcards")
    await nc.flush()
    await nc.publish(f"{ns}.a2a.v1.discovery.ping", b"{}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await cards.next_msg(timeout=left)
            except NatsTimeout:
                break
            try:
                card = json.loads(msg.data)
            except ValueError:
                continue
            if fits(card, name, tag):
                return card
        return None
    finally:
        await cards.unsubscribe()


async def call(nc, ns, workflow, arguments, timeout):
    """Sends `message/send` and returns the final task (a dict)."""
    task_id = uuid.uuid4().hex
    request = {
        "jsonrpc": "2.0",
        "id": task_id,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": task_id,
                "taskId": task_id,
                "role": "user",
                "parts": [{"kind": "data", "data": arguments}],
            }
        },
    }
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    await nc.flush()
    await nc.publish(
        f"{ns}.a2a.v1.agent.request.{workflow}",
        json.dumps(request).encode(),
        reply=inbox,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await replies.next_msg(timeout=left)
            except NatsTimeout:
                break
            reply = json.loads(msg.data)
            if reply.get("error"):
                raise RuntimeError(f"JSON-RPC error: {reply['error']}")
            result = reply.get("result") or {}
            state = (result.get("status") or {}).get("state")
            if result.get("kind") == "task" and state in FINAL_STATES:
                return result
        raise RuntimeError(f"no final reply from {workflow} within {timeout} s")
    finally:
        await replies.unsubscribe()


def output_of(task):
    """The output of a completed task: its first DataPart (or a stored output's URI)."""
    for part in task["status"].get("message", {}).get("parts") or []:
        if part.get("kind") == "data":
            data = part["data"]
            if (part.get("metadata") or {}).get("mesh_wrapped"):
                return data.get("value")
            return data
        if part.get("kind") == "file":
            return {"stored_output": part["file"].get("uri")}
    return None


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats-url", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--namespace", default="mesh")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--workflow", help="the workflow's name")
    which.add_argument("--tag", help="a skill tag of the workflow")
    parser.add_argument("--input", required=True, help="the input, a JSON object")
    parser.add_argument("--discovery-timeout", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    try:
        arguments = json.loads(args.input)
    except ValueError as e:
        print(f"--input is not JSON: {e}", file=sys.stderr)
        return 1

    nc = await nats.connect(args.nats_url)
    try:
        card = await discover(nc, args.namespace, args.workflow, args.tag, args.discovery_timeout)
        if card is None:
            what = f"named {args.workflow}" if args.workflow else f"with skill tag {args.tag!r}"
            print(f"no workflow {what} on the mesh", file=sys.stderr)
            return 1
        schema = extension(card, SCHEMAS).get("input_schema") or {}
        print(f"workflow: {card['name']}: {card.get('description', '')}")
        print(f"input schema: {json.dumps(schema)}")
        try:
            task = await call(nc, args.namespace, card["name"], arguments, args.timeout)
        except RuntimeError as e:
            print(f"calling {card['name']}: {e}", file=sys.stderr)
            return 2
        state = task["status"]["state"]
        if state != "completed":
            texts = [p.get("text", "") for p in task["status"].get("message", {}).get("parts") or []
                     if p.get("kind") == "text"]
            why = " ".join(texts) or json.dumps(task["status"].get("message"))
            print(f"{card['name']} {state}: {why}", file=sys.stderr)
            return 2
        print(f"output: {json.dumps(output_of(task))}")
        return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
