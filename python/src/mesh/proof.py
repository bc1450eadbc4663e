"""Call tokens and their proofs (``Mesh-Call-Token``, ``Mesh-Call-Mac``), as
docs/protocol.md's "Call tokens" writes them byte for byte.

A workflow node hands each call a secret token; the agent proves every reply, status
update and cancel of the call with an HMAC keyed by it, over the subject and the payload.
"""

from __future__ import annotations

import hashlib
import hmac
import re

CALL_TOKEN = "Mesh-Call-Token"
"""Request header carrying the call's token."""
CALL_MAC = "Mesh-Call-Mac"
"""Header of each reply, status update and cancel of a call made with a token."""

_TOKEN = re.compile(r"[0-9a-f]{32,128}")


def check_token(token: str) -> None:
    """Raises ``ValueError`` unless ``token`` is 32 to 128 lowercase hex characters."""
    if not _TOKEN.fullmatch(token):
        raise ValueError(
            f"header {CALL_TOKEN} must be 32 to 128 lowercase hex characters "
            f"([0-9a-f]{{32,128}}), got {len(token)} characters"
        )


def mac(token: str, subject: str, payload: bytes) -> str:
    """The ``Mesh-Call-Mac`` of ``payload`` published to ``subject`` under ``token``."""
    text = f"mesh-call-v1\n{subject}\n{hashlib.sha256(payload).hexdigest()}"
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()


def verify(token: str, subject: str, payload: bytes, given: str) -> bool:
    """Whether ``given`` is the MAC of ``payload`` on ``subject`` under ``token``."""
    return hmac.compare_digest(mac(token, subject, payload), given.strip())


def reply_msg_id(token: str) -> str:
    """The ``Nats-Msg-Id`` of the final reply to a call made with ``token``."""
    digest = hmac.new(token.encode(), b"mesh-call-msg-id-v1", hashlib.sha256).hexdigest()
    return f"call.{digest}"
