"""Workflows whose nodes are agents of both SDKs, through the real workflow node: a run
that ends right under ``kill -9`` of a workflow replica, agents' status updates forwarded to
the run's caller, and steering signed with an NKey seed (``mesh-sig-v2``): an approver's
decision and an operator's cancel."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from mesh import CallCanceled, CallRefused, Mesh, protocol

from ..conftest import Keys, Proc, start_agent, start_node


async def test_a_rust_then_python_workflow_ends_right_when_a_replica_is_killed(
    nats_url: str, keys: Keys, workdir: Path, nc: Any
) -> None:
    """Its own namespace: two replicas and both agents, one replica killed mid-run."""
    ns = "killed"
    agents = [
        start_agent("rust", nats_url, "ConfRust", keys.seed_file(workdir, "rust"), ns),
        start_agent("python", nats_url, "ConfPy", keys.seed_file(workdir, "python"), ns),
    ]
    replicas = [start_node(nats_url, keys, ns), start_node(nats_url, keys, ns)]
    try:
        mesh = Mesh(nc, namespace=ns, caller="kill-test")
        key = uuid.uuid4().hex
        call = await mesh.start("Mixed", {"value": 5, "key": key}, timeout=120)
        async for p in call.progress():
            if p.kind == "agent_status" and p.data and p.data.get("text") == f"gate {key} open":
                break
        replicas[0].kill()  # kill -9: SIGKILL, no drain
        await nc.publish(f"conformance.release.{key}", b"")
        assert await call.result() == {"doubled": 10.0, "gate_runs": 1}
    finally:
        for p in replicas + agents:
            p.kill()


async def test_agents_status_updates_reach_the_runs_caller(mesh: Mesh, nc: Any, node: Proc) -> None:
    # Each agent holds its call open until the caller heard what it said (an update of a
    # call that has ended is not forwarded), then is released.
    key = uuid.uuid4().hex
    call = await mesh.start("Say", {"key": key})
    said = set()
    async for p in call.progress():
        if p.kind == "agent_status" and p.data:
            said.add((p.data["node_id"], p.data.get("text")))
            if len(said) == 2:
                break
    assert said == {("rust", f"gate r{key} open"), ("python", f"gate p{key} open")}
    for side in "rp":
        await nc.publish(f"conformance.release.{side}{key}", b"")
    assert await call.result() == {"rust": 1.0, "python": 2.0}


async def test_a_signed_approval_lets_a_run_go_on_and_an_unsigned_one_is_refused(
    nc: Any, keys: Keys, node: Proc, agents: Any
) -> None:
    caller = Mesh(nc, caller="approvals")
    call = await caller.start("Gated", {"value": 4})
    execution = None
    async for p in call.progress():
        if p.kind == "run_started" and p.data:
            execution = p.data["execution_id"]
        if p.kind == "approval_requested":
            break
    assert execution is not None
    with pytest.raises(Exception, match=r"(?i)sign"):
        await caller.approve("Gated", execution, "gate")
    stranger = Mesh(nc, signer=keys.rust)  # a key, but not the approver's
    with pytest.raises(Exception, match=r"(?i)approver"):
        await stranger.approve("Gated", execution, "gate")
    approver = Mesh(nc, signer=keys.approver)
    await approver.approve("Gated", execution, "gate", comment="fine")
    assert await call.result() == {"doubled": 8.0}


async def test_an_operators_signed_cancel_ends_a_run_others_may_not(
    nc: Any, keys: Keys, node: Proc, agents: Any
) -> None:
    owner = Mesh(nc, caller="owner")
    call = await owner.start("Gated", {"value": 1})
    execution = None
    async for p in call.progress():
        if p.kind == "run_started" and p.data:
            execution = p.data["execution_id"]
        if p.kind == "approval_requested":
            break
    assert execution is not None
    with pytest.raises(CallRefused) as e:
        await Mesh(nc, caller="someone-else").cancel("Gated", execution)
    assert e.value.code == protocol.NOT_PERMITTED
    with pytest.raises(CallRefused):
        await Mesh(nc, signer=keys.python).cancel("Gated", execution)  # signed, not an operator
    await Mesh(nc, signer=keys.operator).cancel("Gated", execution, reason="cleanup")
    with pytest.raises(CallCanceled):
        await call.result()
