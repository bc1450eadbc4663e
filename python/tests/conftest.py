"""Fixtures of the Python SDK's tests: a real nats-server, the real workflow node and the
conformance agent written with each SDK, all started here on loopback and stopped at the
end. The binaries come from the environment (the Rust test that runs this suite,
``workflow-node/tests/python/main.rs``, sets them): ``NATS_SERVER_BIN``,
``WORKFLOW_NODE_BIN``, ``CONFORMANCE_AGENT_BIN``. Readiness is read from the processes
(a connection, a ``ready`` or ``serving`` line), never waited for by sleeping.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
import pytest_asyncio

from mesh import Mesh, Signer

HERE = Path(__file__).parent
WORKFLOWS = HERE / "conformance" / "workflows"


def binary(var: str) -> str:
    """The path in ``var``; fails the run saying how to set it."""
    path = os.environ.get(var)
    if not path or not Path(path).exists():
        pytest.fail(
            f"{var} must name the binary "
            "(run the suite with cargo test -p workflow-node --test python)"
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proc:
    """A child process whose output (stdout and stderr, merged) a thread keeps reading, so
    that a full pipe never blocks it; killed at teardown."""

    def __init__(self, name: str, args: list[str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._ended = False
        self.popen = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()
        with self._new:
            self._ended = True
            self._new.notify_all()

    def wait_line(self, start: str, timeout: float = 60) -> str:
        """Waits for an output line starting with ``start`` (fails if the process ends)."""
        with self._new:
            ok = self._new.wait_for(
                lambda: self._ended or any(line.startswith(start) for line in self.lines), timeout
            )
            found = [line for line in self.lines if line.startswith(start)]
            if found:
                return found[0]
            why = "ended" if ok else f"did not say it in {timeout} s"
            raise AssertionError(f"{self.name} {why} before saying {start!r}: {self.output()}")

    def output(self) -> str:
        """Its output so far (the last 4000 characters)."""
        return "".join(self.lines)[-4000:]

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()


def spawn(name: str, args: list[str]) -> Proc:
    return Proc(name, args)


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="mesh-py-tests-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def nats_url(workdir: Path) -> Iterator[str]:
    """A nats-server with JetStream, ready once a client connects."""
    port = free_port()
    # A fixed JetStream budget (the Rust harness's `DEFAULT_MAX_FILE_STORE`): left to
    # itself the server takes 75 % of the disk free at its start, and each namespace's
    # node reserves about 1.2 GiB of byte limits, so a fuller disk refused a second one.
    config = workdir / "nats.conf"
    config.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f"jetstream {{\n  store_dir: {json.dumps(str(workdir / 'js'))}\n"
        "  max_file_store: 1TB\n}\n"
    )
    proc = spawn("nats-server", [binary("NATS_SERVER_BIN"), "-c", str(config)])
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.popen.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"nats-server did not start: {proc.output()}") from None
            time.sleep(0.02)  # polling for the port, not waiting for an outcome
    yield f"nats://127.0.0.1:{port}"
    proc.kill()


@dataclass
class Keys:
    """The keys of the test mesh: each agent's (cards), an operator's and an approver's."""

    rust: Signer
    python: Signer
    operator: Signer
    approver: Signer

    def seed_file(self, workdir: Path, who: str) -> str:
        path = workdir / f"{who}.nk"
        path.write_text(getattr(self, who).seed + "\n")
        return str(path)


@pytest.fixture(scope="session")
def keys() -> Keys:
    return Keys(Signer.generate(), Signer.generate(), Signer.generate(), Signer.generate())


@dataclass
class AgentUnderTest:
    """One SDK's conformance agent: which SDK, its name on the mesh and its card key."""

    sdk: str
    name: str
    key: str


def start_agent(sdk: str, url: str, name: str, seed_file: str, namespace: str = "mesh") -> Proc:
    common = [
        "--nats-url",
        url,
        "--name",
        name,
        "--heartbeat-ms",
        "200",
        "--nkey-seed-file",
        seed_file,
        "--namespace",
        namespace,
    ]
    if sdk == "rust":
        args = [binary("CONFORMANCE_AGENT_BIN"), *common]
    else:
        args = [sys.executable, str(HERE / "conformance" / "agent_py.py"), *common]
    proc = spawn(f"{sdk} agent {name}", args)
    proc.wait_line("ready")
    return proc


@pytest.fixture(scope="session")
def agents(nats_url: str, keys: Keys, workdir: Path) -> Iterator[dict[str, AgentUnderTest]]:
    """The conformance agent of each SDK: ``ConfRust`` and ``ConfPy``."""
    procs = []
    out = {}
    for sdk, name in (("rust", "ConfRust"), ("python", "ConfPy")):
        procs.append(start_agent(sdk, nats_url, name, keys.seed_file(workdir, sdk)))
        out[sdk] = AgentUnderTest(sdk, name, getattr(keys, sdk).public_key)
    yield out
    for p in procs:
        p.kill()


def start_node(
    url: str, keys: Keys, namespace: str = "mesh", extra: list[str] | None = None
) -> Proc:
    args = [
        binary("WORKFLOW_NODE_BIN"),
        "serve",
        "--nats-url",
        url,
        "--namespace",
        namespace,
        "--operator-key",
        keys.operator.public_key,
        "--approver",
        f"py={keys.approver.public_key}",
        "--ack-wait",
        "2",
        *(extra or []),
        str(WORKFLOWS),
    ]
    proc = spawn(f"workflow-node ({namespace})", args)
    proc.wait_line("serving")
    return proc


@pytest.fixture(scope="session")
def node(nats_url: str, keys: Keys, agents: dict[str, AgentUnderTest]) -> Iterator[Proc]:
    """One workflow node serving ``conformance/workflows``."""
    proc = start_node(nats_url, keys)
    yield proc
    proc.kill()


@pytest_asyncio.fixture(scope="session")
async def nc(nats_url: str) -> AsyncIterator[Any]:
    conn = await nats.connect(nats_url)
    yield conn
    await conn.drain()


@pytest_asyncio.fixture(scope="session")
async def mesh(nc: Any) -> Mesh:
    return Mesh(nc, caller="conformance-tests")


@pytest.fixture(params=["rust", "python"])
def sdk(
    request: pytest.FixtureRequest, agents: dict[str, AgentUnderTest], node: Proc
) -> AgentUnderTest:
    """The agent under test: each scenario runs once per SDK."""
    return agents[request.param]
