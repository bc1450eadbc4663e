"""Subjects of the mesh (docs/protocol.md, "Subjects") and the check of a subject a
requester asks to be answered on (``check_reply``).

Every subject the SDK uses is built here, never by string formatting elsewhere.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "mesh"
"""The namespace unless told otherwise."""
MAX_SUBJECT_LEN = 256


def agent_request(ns: str, agent: str) -> str:
    """Where an agent's (or workflow's) requests go; its replicas share queue group ``agent``."""
    return f"{ns}.a2a.v1.agent.request.{agent}"


def agent_cancel(ns: str, agent: str) -> str:
    """The cancel broadcast of an agent."""
    return f"{ns}.a2a.v1.agent.cancel.{agent}"


def agent_cards(ns: str) -> str:
    """Where cards are published."""
    return f"{ns}.a2a.v1.discovery.agentcards"


def discovery_ping(ns: str) -> str:
    """Any message here makes every agent republish its card."""
    return f"{ns}.a2a.v1.discovery.ping"


def artifact_get(ns: str) -> str:
    """Where a workflow node serves reads of the artifact bucket."""
    return f"{ns}.a2a.v1.artifact.get"


def artifacts_bucket(ns: str) -> str:
    """The object store bucket of large values and artifacts."""
    return f"{ns}_artifacts"


def check_reply(ns: str, subject: str) -> str | None:
    """Why ``subject`` may not be answered on, or ``None`` when it may: only an inbox
    (first token starting with ``_INBOX``) or ``{ns}.a2a.v1.agent.response.>`` /
    ``{ns}.a2a.v1.agent.status.>``, with no wildcard, space or control character."""
    if len(subject.encode()) > MAX_SUBJECT_LEN:
        return "it is longer than 256 bytes"
    tokens = subject.split(".")
    if not subject or any(not t for t in tokens):
        return "it is empty or has an empty token"
    if any("*" in t or ">" in t for t in tokens):
        return "it has a wildcard"
    if any(not (c.isascii() and c.isprintable() and c != " ") for c in subject):
        return "it has a space, a control character or a character that is not ASCII"
    if tokens[0].startswith("$"):
        return "it is a system subject ($…)"
    if tokens[0].startswith("_INBOX"):
        return None if len(tokens) >= 2 else "an inbox needs a token after its prefix"
    for kind in ("response", "status"):
        prefix = f"{ns}.a2a.v1.agent.{kind}."
        if subject.startswith(prefix):
            rest = subject[len(prefix) :]
            if len(rest.split(".")) >= 2:
                return None
            return "a mesh response or status subject names a caller and a task"
    return "only inboxes (_INBOX…) and the mesh's response and status subjects may be answered on"
