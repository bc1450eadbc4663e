//! NATS header names used on the mesh.

/// W3C trace context (`traceparent`), passed through caller → workflow node → agents so one
/// trace spans the whole call tree.
pub const TRACEPARENT: &str = "traceparent";

/// W3C trace state, passed along with [`TRACEPARENT`] when present.
pub const TRACESTATE: &str = "tracestate";

/// How many workflow hops led to this request (a decimal integer; absent means 0). A
/// workflow node adds one when it calls another workflow and rejects requests deeper than
/// its `max_call_depth`.
pub const CALL_DEPTH: &str = "Mesh-Call-Depth";

/// JetStream de-duplication id: publishes into streams carry it so a retried publish is
/// stored once.
pub const MSG_ID: &str = "Nats-Msg-Id";

/// Where the callee sends its **final** reply (the JSON-RPC response carrying the terminal
/// Task). For calls made by a workflow node this is
/// [`crate::subjects::agent_response`], which the node's event stream captures, so the
/// reply survives the death of the replica that sent the request. When absent, the NATS
/// reply subject of the request message is used.
pub const REPLY_TO: &str = "Mesh-Reply-To";

/// Where the callee sends its **status updates** (`status-update` events, including the
/// workflow progress DataParts). When absent, no status updates are sent.
pub const STATUS_TO: &str = "Mesh-Status-To";

/// Who is calling: the calling agent's or workflow's name. A workflow scopes the task ids of
/// its callers by it, so two callers that pick the same task id start two runs, while one
/// caller resending its request (same task id, same name) reaches the same run. Its
/// `tasks/get` and `tasks/cancel` must carry the same value to find that run. Absent: task
/// ids share one scope (every caller without the header).
pub const CALLER: &str = "Mesh-Caller";

/// The NKey user public key (`U…`) that signed the request (see `agent_sdk::signing`):
/// who proves to be asking, where it matters (an approval decision, a cancel, a start
/// whose run only its signer may cancel). Sent with [`SIGNED_AT`] and [`SIGNATURE`]. The
/// three also sign an agent card message (`agent_sdk::card_trust`).
pub const SIGNER: &str = "Mesh-Signer";

/// When the request was signed, in milliseconds since the Unix epoch: a signature more
/// than five minutes away from the receiver's clock is refused.
pub const SIGNED_AT: &str = "Mesh-Signed-At";

/// A fresh random value of the signed request (at least 128 bits, base64url without
/// padding): the receiver remembers each nonce it accepted for as long as the signature is
/// valid, so a captured request sent again is refused however long after.
pub const NONCE: &str = "Mesh-Nonce";

/// The Ed25519 signature of [`SIGNER`]'s key, base64url without padding, over the lines
/// of `mesh-sig-v2` (see `agent_sdk::signing` and `docs/security.md`): the subject, the
/// NATS reply subject, [`REPLY_TO`], [`STATUS_TO`], [`CALLER`], [`SIGNED_AT`], [`NONCE`]
/// and the hex SHA-256 of the payload. A card's is over
/// `mesh-card-v1\n{name}\n{signed_at}\n{hex sha256 of the card}` (no nonce).
pub const SIGNATURE: &str = "Mesh-Signature";

/// On an answer to an artifact read ([`crate::subjects::artifact_get`]): which part of the
/// object's bytes the message carries, `{index}/{count}` in decimal, from `1/{count}`; the
/// parts arrive in order and their payloads, joined, are the object.
pub const ARTIFACT_PART: &str = "Mesh-Artifact-Part";

/// On the first part of an artifact read's answer: the object's media type, when stored.
pub const ARTIFACT_MIME: &str = "Mesh-Artifact-Mime";

/// On the first part of an artifact read's answer: the version read (of a versioned
/// artifact, a link followed to the version it points at), in decimal.
pub const ARTIFACT_VERSION: &str = "Mesh-Artifact-Version";

/// On an artifact read's refusal (the only message of the answer, its payload saying why
/// in words): `not-found`, `too-large`, `invalid` or `unavailable`.
pub const ARTIFACT_ERROR: &str = "Mesh-Artifact-Error";
