"""Drives the workflow node's MCP door with the official MCP Python SDK (`mcp`, pinned in
.ci/python-requirements.txt), over stdio or Streamable HTTP, in either era ('legacy': the
initialize handshake; '2026-07-28': per-request metadata). It lists the tools, calls one
with progress, sends hostile calls, meets an approval gate, reads a large output through
its resource link, and cancels a slow run. Each check raises on failure; the last line
on stdout is a JSON summary the Rust test reads (the cancelled run's task is found there).

With --list-until NAME it only lists the tools, again until NAME is among them, and prints
them as {"tools": [...]}: what a door serves to a client that only looks.

Usage: client.py --mode MODE (--stdio JSON_ARGV | --url URL [--token TOKEN]) [--list-until NAME]
"""

import argparse
import asyncio
import json
import sys

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


WANTED = ("Doubling", "Gate", "Slow", "Big")
# The trace context the Big call carries; the Rust side checks agent Big received it.
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def tools_when_listed(client, changes):
    """The tools, once all of WANTED are listed: the door's catalog fills as cards arrive,
    and each arrival that changes the list is announced (notifications/tools/list_changed),
    so the list is read again on each announcement."""
    while True:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        if all(name in tools for name in WANTED):
            return tools
        try:
            await asyncio.wait_for(changes.get(), timeout=60)
        except asyncio.TimeoutError:
            raise AssertionError(f"no list change announced; listed: {sorted(tools)}")


async def scenario(client, summary, changes):
    tools = await tools_when_listed(client, changes)
    summary["tools"] = sorted(tools)
    summary["list_changes"] = changes.seen
    doubling = tools["Doubling"]
    check(doubling.input_schema["properties"]["value"]["type"] == "number", doubling.input_schema)
    check(doubling.output_schema is not None, "Doubling has an outputSchema")
    check(doubling.output_schema["properties"]["doubled"]["type"] == "number", doubling.output_schema)

    # A call, with progress: the SDK validates structuredContent against the outputSchema.
    seen = []

    async def progress(value, total, message):
        seen.append((value, message))

    result = await client.call_tool("Doubling", {"value": 21}, progress_callback=progress)
    check(not result.is_error, f"Doubling succeeded: {text_of(result)}")
    check(result.structured_content == {"doubled": 42}, result.structured_content)
    check(json.loads(text_of(result)) == {"doubled": 42}, text_of(result))
    check(seen, "progress notifications arrived")
    values = [v for v, _ in seen]
    check(values == sorted(values) and len(set(values)) == len(values), f"progress grows: {values}")
    check(any("node one" in (m or "") for _, m in seen), f"progress names the node: {seen}")
    summary["progress"] = [m for _, m in seen]

    # Hostile calls: arguments that break the schema, an unknown tool, an oversized one.
    bad = await client.call_tool("Doubling", {"value": "many"})
    check(bad.is_error, "bad arguments are a tool error")
    check("do not fit its schema" in text_of(bad), text_of(bad))
    try:
        await client.call_tool("NoSuchTool", {})
        raise AssertionError("an unknown tool was called")
    except MCPError as e:
        check("no tool NoSuchTool" in str(e), str(e))
        summary["unknown"] = str(e)
    huge = await client.call_tool("Doubling", {"value": 1, "pad": "x" * (2 << 20)})
    check(huge.is_error, "oversized arguments are a tool error")
    check("over the limit" in text_of(huge), text_of(huge))
    # The door still serves after all that.
    again = await client.call_tool("Doubling", {"value": 2})
    check(again.structured_content == {"doubled": 4}, again.structured_content)

    # An approval gate: reported as such, at once, with the run and the gate.
    gate = await client.call_tool("Gate", {"text": "hi"})
    check(gate.is_error, "a gate is not an output")
    check("waits for approval at node gate" in text_of(gate), text_of(gate))
    approval = (gate.meta or {}).get("io.github.agent-mesh/approval")
    check(approval and approval["node"] == "gate", f"approval metadata: {gate.meta}")
    summary["gate_execution"] = approval["execution_id"]

    # A large output: linked as a resource, readable, and the structured content too.
    big = await client.call_tool("Big", {"size": 300000}, meta={"traceparent": TRACEPARENT})
    check(not big.is_error, text_of(big))
    links = [c for c in big.content if getattr(c, "type", "") == "resource_link"]
    check(len(links) == 1, f"one resource link: {big.content}")
    uri = str(links[0].uri)
    check(uri.startswith("nats-object://"), uri)
    check(len(big.structured_content["blob"]) == 300000, "structured content is the output")
    read = await client.read_resource(uri)
    check(json.loads(read.contents[0].text)["blob"] == "b" * 300000, "the resource is the output")
    try:
        await client.read_resource("file:///etc/passwd")
        raise AssertionError("a file resource was read")
    except MCPError as e:
        summary["foreign_resource"] = str(e)

    # A cancel: once the run has started, the awaiting task is cancelled, which makes the
    # SDK cancel the request; the Rust side checks the run ends cancelled.
    started = asyncio.Event()
    slow_seen = []

    async def slow_progress(value, total, message):
        slow_seen.append(message)
        if message and "node wait started" in message:
            started.set()

    call = asyncio.ensure_future(
        client.call_tool("Slow", {"text": "x"}, progress_callback=slow_progress)
    )
    waiter = asyncio.ensure_future(started.wait())
    done, _ = await asyncio.wait({call, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    check(waiter in done, f"the slow run started: {slow_seen} {call.done() and call.result()}")
    summary["slow_run"] = next(m for m in slow_seen if m.startswith("run "))
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        pass
    # Still serving.
    check("Doubling" in [t.name for t in (await client.list_tools()).tools], "listed after cancel")

    # A card that comes is announced: the Rust side starts agent Late once this is printed.
    while not changes.empty():
        changes.get_nowait()
    print("listening", flush=True)
    while True:
        try:
            await asyncio.wait_for(changes.get(), timeout=60)
        except asyncio.TimeoutError:
            raise AssertionError("the new agent was not announced")
        if "Late" in [t.name for t in (await client.list_tools()).tools]:
            break


class Changes(asyncio.Queue):
    """The list changes announced: on the session (legacy) or a listen stream (2026)."""

    seen = 0

    def announce(self):
        self.seen += 1
        self.put_nowait(True)

    async def on_message(self, message):
        if isinstance(message, types.ToolListChangedNotification):
            self.announce()


async def listed_once(client, name):
    """The tools' names once `name` is among them (the door's catalog fills as cards
    arrive): listed again every 50 ms, for 60 s at most."""
    for _ in range(1200):
        names = sorted(t.name for t in (await client.list_tools()).tools)
        if name in names:
            return names
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} was never listed; listed: {names}")


async def run(client, summary, changes, list_until=None):
    summary["protocol"] = client.protocol_version
    if list_until:
        summary["tools"] = await listed_once(client, list_until)
        return
    if client.protocol_version in ("2025-06-18", "2025-11-25"):
        await scenario(client, summary, changes)
        return
    async with client.listen(tools_list_changed=True) as sub:

        async def pump():
            async for _event in sub:
                changes.announce()

        pumping = asyncio.ensure_future(pump())
        try:
            await scenario(client, summary, changes)
        finally:
            pumping.cancel()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True)
    parser.add_argument("--stdio")
    parser.add_argument("--url")
    parser.add_argument("--token")
    parser.add_argument("--list-until")
    args = parser.parse_args()
    summary = {"mode": args.mode}
    changes = Changes()
    if args.stdio:
        argv = json.loads(args.stdio)
        server = StdioServerParameters(command=argv[0], args=argv[1:])
        async with Client(
            server, mode=args.mode, read_timeout_seconds=120, message_handler=changes.on_message
        ) as client:
            await run(client, summary, changes)
    else:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            transport = streamable_http_client(args.url, http_client=http)
            async with Client(
                transport, mode=args.mode, read_timeout_seconds=120,
                message_handler=changes.on_message,
            ) as client:
                await run(client, summary, changes, args.list_until)
    print(json.dumps(summary))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BaseException as e:  # noqa: BLE001 - the test prints why
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        raise
