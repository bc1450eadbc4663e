"""Serve agents on the NATS agent mesh and call its agents and workflows, from Python.

The Python sibling of the Rust crate ``agent-sdk``, built from ``docs/protocol.md``::

    from mesh import Mesh, agent

    @agent(name="Doubler", input_schema={"type": "object", "required": ["value"]})
    async def doubler(input, ctx):
        await ctx.send_status("doubling")
        return {"value": input["value"] * 2}

    mesh = await Mesh.connect("nats://127.0.0.1:4222")
    serving = await doubler.serve(mesh.nc)
    print(await mesh.call("Doubler", {"value": 21}))

Modules: :mod:`mesh.agent` (serving), :mod:`mesh.client` (calling, progress, cancel,
steering), :mod:`mesh.catalog` and :mod:`mesh.cards` (cards and their trust),
:mod:`mesh.tools` (tool declarations for LLMs), :mod:`mesh.artifacts` (the object store),
:mod:`mesh.signing` (NKey signatures), :mod:`mesh.proof` (call tokens),
:mod:`mesh.errors`; :mod:`mesh.protocol`, :mod:`mesh.reading` and :mod:`mesh.dedup` are
the sans-IO core.
"""

from .agent import Agent, Context, HandlerError, Serving, agent, run
from .artifacts import ArtifactInfo, ArtifactRef, ArtifactStore
from .cards import CardTrust, agent_card, skill
from .catalog import Catalog
from .client import Call, CallCanceled, Mesh
from .errors import (
    ArtifactError,
    CallError,
    CallFailed,
    CallRefused,
    CallTimedOut,
    InvalidArguments,
    MeshError,
    NoSuchAgent,
    ServeError,
    SignatureError,
)
from .reading import Progress
from .signing import Signer
from .tools import Tool

__all__ = [
    "Agent",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactRef",
    "ArtifactStore",
    "Call",
    "CallCanceled",
    "CallError",
    "CallFailed",
    "CallRefused",
    "CallTimedOut",
    "CardTrust",
    "Catalog",
    "Context",
    "HandlerError",
    "InvalidArguments",
    "Mesh",
    "MeshError",
    "NoSuchAgent",
    "Progress",
    "ServeError",
    "Serving",
    "SignatureError",
    "Signer",
    "Tool",
    "agent",
    "agent_card",
    "run",
    "skill",
]
