"""The artifact store (docs/protocol.md, "Artifacts"): large values and named, versioned
artifacts in the JetStream object store bucket ``{ns}_artifacts``.

Version ``v`` of artifact ``name`` is the object ``{name}@v{v}`` with metadata
``artifact``, ``version``, ``mime`` and ``run``; the object ``name`` links to the latest.
Reads go through a workflow node (``{ns}.a2a.v1.artifact.get``, which works under the
shipped permissions), and straight to JetStream only when no node answers.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.errors import NotFoundError, ObjectNotFoundError

from . import protocol, subjects
from .errors import ArtifactError

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""The largest artifact a store writes or reads unless told otherwise."""
PART_TIMEOUT = 30.0
"""Seconds a reader waits for each part of an object from a node."""

_VERSIONED = re.compile(r"^(.+)@v([1-9][0-9]*)$")
_EMPTY_DIGEST = "SHA-256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU="


@dataclass(frozen=True)
class ArtifactRef:
    """A reference to an artifact: ``name`` and a version (``None``: the latest)."""

    name: str
    version: int | None = None

    @property
    def key(self) -> str:
        """The object's name in the bucket."""
        return self.name if self.version is None else f"{self.name}@v{self.version}"


@dataclass(frozen=True)
class ArtifactInfo:
    """One stored version, as :meth:`ArtifactStore.list` gives it."""

    ref: ArtifactRef
    mime: str
    size: int
    run: str | None


def unguessable() -> str:
    """64 hex digits of two random version-4 UUIDs: an object name's key part."""
    return uuid.uuid4().hex + uuid.uuid4().hex


class ArtifactStore:
    """The artifact bucket of a namespace, over one NATS connection."""

    def __init__(
        self,
        nc: Client,
        ns: str = subjects.DEFAULT_NAMESPACE,
        *,
        run: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._nc = nc
        self.ns = ns
        self.bucket = subjects.artifacts_bucket(ns)
        self.run = run
        self.max_bytes = max_bytes

    async def _store(self) -> Any:
        js = self._nc.jetstream()
        try:
            return await js.object_store(self.bucket)
        except NotFoundError:
            try:
                return await js.create_object_store(self.bucket)
            except Exception as e:
                raise ArtifactError(
                    f"cannot open the bucket {self.bucket}: {e}", "unavailable"
                ) from e

    # --- writing ------------------------------------------------------------------------

    async def put_object(self, name: str, data: bytes) -> None:
        """Stores ``data`` as the plain object ``name`` (large values of calls)."""
        if len(data) > self.max_bytes:
            raise ArtifactError(
                f"{name} is {len(data)} bytes, over the limit of {self.max_bytes}", "too-large"
            )
        store = await self._store()
        try:
            await store.put(name, data)
        except Exception as e:
            raise ArtifactError(f"cannot store {name} in {self.bucket}: {e}") from e

    async def put_json(self, name: str, value: Any) -> None:
        """Stores ``value`` as JSON in the plain object ``name``."""
        await self.put_object(name, protocol.encode(value))

    async def put(self, name: str, data: bytes, mime: str = protocol.JSON_MIME) -> ArtifactRef:
        """Stores the next version of artifact ``name``; its reference."""
        if not name or "://" in name or _VERSIONED.match(name):
            raise ArtifactError(
                "not a valid artifact name (it must be non-empty, not a URI, and not end in a "
                "version suffix like '@v3')",
                "invalid",
            )
        if len(data) > self.max_bytes:
            raise ArtifactError(
                f"{name} is {len(data)} bytes, over the limit of {self.max_bytes}", "too-large"
            )
        store = await self._store()
        version = (await self._latest(name) or 0) + 1
        key = f"{name}@v{version}"
        try:
            await store.put(key, data)
            await self._set_meta(
                key,
                {"artifact": name, "version": str(version), "mime": mime, "run": self.run or ""},
            )
            await self._link(name, key)
        except ArtifactError:
            raise
        except Exception as e:
            raise ArtifactError(f"cannot store {key} in {self.bucket}: {e}") from e
        return ArtifactRef(name, version)

    def _meta_subject(self, name: str) -> str:
        return f"$O.{self.bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"

    async def _raw_meta(self, name: str) -> dict[str, Any] | None:
        js = self._nc.jetstream()
        try:
            msg = await js.get_last_msg(f"OBJ_{self.bucket}", self._meta_subject(name))
        except NotFoundError:
            return None
        meta = json.loads(msg.data or b"{}")
        if not isinstance(meta, dict) or meta.get("deleted"):
            return None
        return meta

    async def _publish_meta(self, name: str, meta: dict[str, Any]) -> None:
        js = self._nc.jetstream()
        await js.publish(
            self._meta_subject(name), json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"}
        )

    async def _set_meta(self, name: str, metadata: dict[str, str]) -> None:
        meta = await self._raw_meta(name)
        if meta is None:
            raise ArtifactError(f"{name} vanished while it was written")
        meta["metadata"] = metadata
        await self._publish_meta(name, meta)

    async def _link(self, name: str, target: str) -> None:
        meta = {
            "name": name,
            "bucket": self.bucket,
            "nuid": uuid.uuid4().hex,
            "size": 0,
            "chunks": 0,
            "mtime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "digest": _EMPTY_DIGEST,
            "options": {"link": {"bucket": self.bucket, "name": target}},
        }
        await self._publish_meta(name, meta)

    async def _latest(self, name: str) -> int | None:
        meta = await self._raw_meta(name)
        if meta is None:
            return None
        link = (meta.get("options") or {}).get("link") or {}
        m = _VERSIONED.match(str(link.get("name") or ""))
        if not m:
            raise ArtifactError(f"an unversioned object already has the name {name}", "invalid")
        return int(m.group(2))

    async def list(self, run: str) -> list[ArtifactInfo]:
        """Every stored version whose ``run`` metadata is ``run``, by name and version."""
        store = await self._store()
        try:
            infos = await store.list()
        except NotFoundError:
            return []
        found = []
        for info in infos:
            m = _VERSIONED.match(info.name)
            if info.deleted or not m:
                continue
            meta = await self._raw_meta(info.name) or {}
            md = meta.get("metadata") or {}
            if md.get("run") != run:
                continue
            found.append(
                ArtifactInfo(
                    ArtifactRef(m.group(1), int(m.group(2))),
                    md.get("mime", ""),
                    info.size or 0,
                    run,
                )
            )
        return sorted(found, key=lambda a: (a.ref.name, a.ref.version or 0))

    # --- reading ------------------------------------------------------------------------

    async def get(self, ref: ArtifactRef | str) -> bytes:
        """The bytes of an artifact version, a plain object name, or a ``nats-object://``
        URI of this bucket."""
        if isinstance(ref, ArtifactRef):
            name = ref.key
        elif ref.startswith("nats-object://"):
            parsed = protocol.parse_object_uri(ref)
            if parsed is None or parsed[0] != self.bucket:
                raise ArtifactError(
                    f"'{ref}' is not in the mesh's artifact bucket '{self.bucket}'", "invalid"
                )
            name = parsed[1]
        else:
            name = ref
        try:
            return await self._get_from_node(name)
        except NoRespondersError:
            return await self._get_direct(name)

    async def get_json(self, ref: ArtifactRef | str) -> Any:
        """:meth:`get`, read as JSON."""
        data = await self.get(ref)
        try:
            return json.loads(data)
        except ValueError as e:
            raise ArtifactError(f"the artifact is not JSON: {e}") from e

    async def _get_from_node(self, name: str) -> bytes:
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        try:
            await self._nc.publish(subjects.artifact_get(self.ns), name.encode(), reply=inbox)
            chunks: list[bytes] = []
            total = 0
            count = None
            while count is None or len(chunks) < count:
                try:
                    msg = await sub.next_msg(timeout=PART_TIMEOUT)
                except asyncio.TimeoutError as e:
                    raise ArtifactError(
                        f"no part of {name} arrived within {PART_TIMEOUT:.0f} s", "unavailable"
                    ) from e
                headers = msg.headers or {}
                if headers.get("Status") == "503":
                    raise NoRespondersError
                if "Mesh-Artifact-Error" in headers:
                    raise ArtifactError(
                        f"{name}: {msg.data.decode(errors='replace')}",
                        headers["Mesh-Artifact-Error"],
                    )
                index, _, of = headers.get("Mesh-Artifact-Part", "").partition("/")
                if not index.isdigit() or not of.isdigit() or int(index) != len(chunks) + 1:
                    raise ArtifactError(
                        f"{name}: a part out of order or without Mesh-Artifact-Part", "unavailable"
                    )
                count = int(of)
                total += len(msg.data)
                if total > self.max_bytes:
                    raise ArtifactError(
                        f"{name} is over the limit of {self.max_bytes} bytes", "too-large"
                    )
                chunks.append(msg.data)
            return b"".join(chunks)
        finally:
            await sub.unsubscribe()

    async def _get_direct(self, name: str) -> bytes:
        store = await self._store()
        try:
            result = await store.get(name)
        except ObjectNotFoundError as e:
            raise ArtifactError(f"{name} is not in {self.bucket}", "not-found") from e
        data = bytes(result.data or b"")
        if len(data) > self.max_bytes:
            raise ArtifactError(f"{name} is over the limit of {self.max_bytes} bytes", "too-large")
        return data
