"""NKey signatures: requests signed with ``mesh-sig-v2`` (docs/security.md, "Identity")
and cards signed with ``mesh-card-v1`` (docs/protocol.md, "Signed cards").

A :class:`Signer` holds an NKey user seed (``SU…``); :func:`sign_request` gives the four
headers that prove who sends a request, :func:`sign_card` the three of a card message.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nkeys

from .errors import SignatureError

SIGNER = "Mesh-Signer"
SIGNED_AT = "Mesh-Signed-At"
NONCE = "Mesh-Nonce"
SIGNATURE = "Mesh-Signature"
REPLY_TO = "Mesh-Reply-To"
STATUS_TO = "Mesh-Status-To"
CALLER = "Mesh-Caller"

CARD_SKEW_MS = 300_000
"""How far a card's signing time may be from the reader's clock, either way."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """An NKey user key pair that signs requests and cards."""

    def __init__(self, seed: str) -> None:
        seed = seed.strip()
        if not seed.startswith("SU"):
            raise SignatureError("an NKey user seed starts with SU")
        try:
            self._keys: Any = nkeys.from_seed(seed.encode())
            self._public: str = self._keys.public_key.decode()
        except Exception as e:  # nkeys raises its own classes and binascii's
            raise SignatureError(f"not a valid NKey user seed: {e}") from e
        self._seed = seed

    @classmethod
    def from_seed_file(cls, path: str | os.PathLike[str]) -> Signer:
        """A signer from a file holding the seed (``nk -gen user``), or a ``.creds`` file."""
        text = Path(path).read_text()
        for line in text.splitlines():
            if line.strip().startswith("SU"):
                return cls(line.strip())
        raise SignatureError(f"{path} holds no NKey user seed (a line starting with SU)")

    @classmethod
    def generate(cls) -> Signer:
        """A new random key."""
        seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
        return cls(seed.decode())

    @property
    def public_key(self) -> str:
        """The user public key, ``U…`` (56 characters)."""
        return self._public

    @property
    def seed(self) -> str:
        """The seed, ``SU…``: keep it secret."""
        return self._seed

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature (64 bytes) of ``data``."""
        return bytes(self._keys.sign(data))


def request_text(
    subject: str,
    reply: str | None,
    headers: Mapping[str, str],
    payload: bytes,
) -> str:
    """The text ``mesh-sig-v2`` signs: nine lines joined by ``\\n``, no newline after the
    last, absent headers as empty lines, values stripped of surrounding whitespace."""

    def h(name: str) -> str:
        return headers.get(name, "").strip()

    return "\n".join(
        [
            "mesh-sig-v2",
            subject,
            (reply or "").strip(),
            h(REPLY_TO),
            h(STATUS_TO),
            h(CALLER),
            h(SIGNED_AT),
            h(NONCE),
            hashlib.sha256(payload).hexdigest(),
        ]
    )


def sign_request(
    signer: Signer,
    subject: str,
    reply: str | None,
    headers: Mapping[str, str],
    payload: bytes,
    now_ms: int | None = None,
) -> dict[str, str]:
    """``headers`` plus the four signature headers of a request published to ``subject``
    with NATS reply ``reply``. Sign each send (and each resend) anew: a node accepts a
    nonce once."""
    out = dict(headers)
    out[SIGNER] = signer.public_key
    out[SIGNED_AT] = str(now_ms if now_ms is not None else int(time.time() * 1000))
    out[NONCE] = _b64(os.urandom(32))
    text = request_text(subject, reply, out, payload)
    out[SIGNATURE] = _b64(signer.sign(text.encode()))
    return out


def card_text(name: str, signed_at: str, payload: bytes) -> str:
    """The text ``mesh-card-v1`` signs."""
    return f"mesh-card-v1\n{name}\n{signed_at}\n{hashlib.sha256(payload).hexdigest()}"


def sign_card(
    signer: Signer, name: str, payload: bytes, now_ms: int | None = None
) -> dict[str, str]:
    """The headers of a card message whose payload is ``payload`` (the card's JSON)."""
    signed_at = str(now_ms if now_ms is not None else int(time.time() * 1000))
    signature = signer.sign(card_text(name, signed_at, payload).encode())
    return {SIGNER: signer.public_key, SIGNED_AT: signed_at, SIGNATURE: _b64(signature)}


def verify_signature(public_key: str, data: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s (``U…``) Ed25519 signature of ``data``."""
    try:
        raw = base64.b32decode(public_key.encode())
    except Exception:
        return False
    if len(raw) != 35 or raw[0] != nkeys.PREFIX_BYTE_USER:
        return False
    import nacl.exceptions
    import nacl.signing

    try:
        nacl.signing.VerifyKey(raw[1:33]).verify(data, signature)
    except (nacl.exceptions.BadSignatureError, ValueError):
        return False
    return True


def verify_card(
    name: str, payload: bytes, headers: Mapping[str, str] | None, now_ms: int | None = None
) -> str | None:
    """The signer's public key when the card's signature headers are complete, fresh
    (within 300 s of the clock) and verify; ``None`` for an unsigned card; raises
    :class:`SignatureError` for a bad one."""
    headers = headers or {}
    got = [headers.get(k) for k in (SIGNER, SIGNED_AT, SIGNATURE)]
    if all(v is None for v in got):
        return None
    signer, signed_at, signature = got
    if signer is None or signed_at is None or signature is None:
        raise SignatureError("the card's signature headers are incomplete")
    if not signed_at.isdigit():
        raise SignatureError(f"{SIGNED_AT} is not a decimal number")
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    if abs(now - int(signed_at)) > CARD_SKEW_MS:
        raise SignatureError("the card's signature is stale or from the future")
    try:
        raw_sig = _unb64(signature)
    except Exception as e:
        raise SignatureError(f"{SIGNATURE} is not base64url") from e
    if not verify_signature(signer, card_text(name, signed_at, payload).encode(), raw_sig):
        raise SignatureError("the card's signature does not verify")
    return signer
