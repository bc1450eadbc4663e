"""nats-server's CPU per operation of each kind a node execution makes.

Starts its own nats-server (``NATS_SERVER_BIN``) with JetStream on a free loopback port, runs
``N`` operations of each kind, 64 at a time, and reads the server's CPU time from
``/proc`` around them: a core request/reply, a KV compare-and-swap, a publish into a
stream (work-queue or limits retention, with or without ``Nats-Msg-Id``, file or memory
storage) and its delivery to a pull consumer with an explicit ack. The figures are in
``docs/figures.md`` ("What bounds the rest"); run it with the project's environment::

    NATS_SERVER_BIN=.nats/bin/nats-server .venv/bin/python \\
        workflow-node/src/bin/mesh_bench/server_costs.py 20000
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

IN_FLIGHT = 64
PAYLOAD = b"x" * 500


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


PORT = free_port()


def server_cpu(pid: int) -> float:
    """The process's user and system CPU time so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    pid: int, name: str, n: int, op: Callable[[int], Awaitable[object]]
) -> None:
    """Runs ``op`` ``n`` times, ``IN_FLIGHT`` at once, and prints the server's CPU per op."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> None:
        async with gate:
            await op(i)

    await asyncio.gather(*(one(i) for i in range(200)))
    c0, t0 = server_cpu(pid), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    c1, t1 = server_cpu(pid), time.monotonic()
    print(
        f"{name:58s} {1e6 * (c1 - c0) / n:6.1f} µs/op ({n / (t1 - t0):6.0f} ops/s)",
        flush=True,
    )


async def main(pid: int, n: int) -> None:
    """Measures every kind of operation on the server whose process is ``pid``."""
    nc: Client = await nats.connect(f"nats://127.0.0.1:{PORT}")
    js = nc.jetstream()

    async def echo(m: Msg) -> None:
        await m.respond(m.data)

    await nc.subscribe("echo", cb=echo, queue="q")
    await measure(
        pid, "core request/reply", n, lambda i: nc.request("echo", PAYLOAD, timeout=10)
    )

    kv = await js.create_key_value(bucket="cas", history=1)
    revisions: dict[str, int] = {}

    async def cas(i: int) -> None:
        key = f"k{i % IN_FLIGHT}"
        if key in revisions:
            revisions[key] = await kv.update(key, PAYLOAD, revisions[key])
        else:
            revisions[key] = await kv.put(key, PAYLOAD)

    await measure(pid, "KV compare-and-swap", n, cas)

    kinds = [
        (RetentionPolicy.WORK_QUEUE, True, StorageType.FILE),
        (RetentionPolicy.WORK_QUEUE, False, StorageType.FILE),
        (RetentionPolicy.LIMITS, True, StorageType.FILE),
        (RetentionPolicy.WORK_QUEUE, True, StorageType.MEMORY),
    ]
    for retention, with_id, storage in kinds:
        stream = f"s_{retention.value}_{int(with_id)}_{storage.value}"
        await js.add_stream(
            StreamConfig(
                name=stream,
                subjects=[f"{stream}.>"],
                retention=retention,
                storage=storage,
                duplicate_window=120.0,
            )
        )

        async def publish(
            i: int, stream: str = stream, with_id: bool = with_id
        ) -> None:
            headers = (
                {"Nats-Msg-Id": f"{stream}-{i}-{time.time_ns()}"} if with_id else None
            )
            await js.publish(f"{stream}.e.{i}", PAYLOAD, headers=headers)

        label = f"publish: {retention.value}, Nats-Msg-Id {with_id}, {storage.value}"
        await measure(pid, label, n, publish)
        pull = await js.pull_subscribe(
            f"{stream}.>",
            durable=f"c_{stream}",
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=20000),
        )
        total, got = n + 200, 0
        c0 = server_cpu(pid)
        while got < total:
            for m in await pull.fetch(min(200, total - got), timeout=5):
                await m.ack()
                got += 1
        per = 1e6 * (server_cpu(pid) - c0) / total
        print(
            f"{'  its delivery to a pull consumer and ack':58s} {per:6.1f} µs/op",
            flush=True,
        )
    await nc.close()


def listening() -> bool:
    """Whether the server takes connections on ``PORT``."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", PORT)) == 0


if __name__ == "__main__":
    store = tempfile.mkdtemp()
    command = [os.environ["NATS_SERVER_BIN"], "-js", "-a", "127.0.0.1", "-p", str(PORT)]
    server = subprocess.Popen(
        [*command, "-sd", store], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if listening():
                break
            time.sleep(0.05)
        else:
            raise SystemExit("nats-server did not start")
        asyncio.run(main(server.pid, int(sys.argv[1]) if len(sys.argv) > 1 else 20000))
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(store, ignore_errors=True)
