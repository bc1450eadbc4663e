//! Who sends a caller its final reply: exactly one of the replicas that end the run (its
//! outbox, run again after a crash) and those answering a request sent again for the
//! ended run. The right to send is a KV marker per reply address, written twice:
//!
//! 1. **`sending`**: the claim and the commit in one write, made by create-only write (or
//!    taken over by compare-and-swap, see below) just before the reply leaves; the reply
//!    is built without I/O, so nothing can stall between the two. Only the writer sends.
//! 2. **`sent:{status}`**: a compare-and-swap at that revision once the reply left.
//!
//! A commit not marked sent within [`SENDING_GRACE`] may be taken over by an answerer
//! only: a publish only fills the connection's buffer, and a process killed before the
//! buffer is written loses the reply it committed to (the `sent:{status}` mark, a
//! JetStream write on the same connection, is answered only after the reply reached the
//! server), but a sender cut from the store's quorum after its reply left (a partition)
//! cannot write its mark either, and its caller has the reply: only a resend says the
//! caller lacks it. A reply marked sent is on its way, for `Config::reply_in_flight`: only
//! then may an answerer send it again, to a caller that evidently lost it. An answerer
//! judges both ages at the time the resend reached its replica, not when it got to answer
//! it: a resend held up in a replica cut from the store (its reads waiting for quorum) was
//! sent before the reply arrived, and answering it after the heal would be a second reply.
//! Time decides only whether a silent sender is dead or slow: a reply held up in the
//! network longer than the grace (a connection stalled, not reset) reaches a caller that
//! resent meanwhile after the answer to its resend: the two are the same bytes with the
//! same de-duplication id, and callers take the first (`docs/protocol.md`, "Resending").
//!
//! Replicas of an earlier version claimed first (`claimed`, a create) and committed by a
//! second compare-and-swap: three writes per reply where one carries the same decision. A
//! `claimed` marker one of them left is still honoured: it is its claimer's for
//! [`CLAIM_GRACE`], then taken over by compare-and-swap, so that claimer's commit fails
//! and it sends nothing.

use std::time::{Duration, SystemTime};

use async_nats::jetstream::{kv, Context};

use messages::msg_id;

use crate::core::RunStatus;
use crate::shell::context::Shared;
use crate::shell::error::{Context as _, Result};
use crate::shell::mesh::seal::Seal;
use crate::shell::store::runs;

/// How long a `claimed` marker (left by a replica of an earlier version) is its
/// claimer's to commit.
const CLAIM_GRACE: Duration = Duration::from_secs(2);
/// How long a committed reply not yet marked sent is its sender's to send.
const SENDING_GRACE: Duration = Duration::from_secs(10);

/// A marker's value while claimed, before the commit (written only by replicas of an
/// earlier version).
const CLAIMED: &str = "claimed";
/// A marker's value once its writer committed to sending.
const SENDING: &str = "sending";

/// Who asks for the right to send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::shell) enum Claimant {
    /// A replica ending the run (or its outbox run again): sends to callers in the record.
    Finisher,
    /// A replica answering a request sent again: a reply committed longer ago than
    /// `Config::reply_in_flight` counts as lost, and is sent again.
    Answerer,
}

/// Where the markers live, and how long they count.
pub(in crate::shell) struct Markers<'a> {
    client: &'a async_nats::Client,
    js: &'a Context,
    bucket: &'a kv::Store,
    /// How long a marker is kept (the run's retention).
    retention: Duration,
    /// How long a committed reply counts as on its way.
    in_flight: Duration,
    /// Makes the reply's de-duplication id.
    seal: &'a Seal,
}

impl<'a> Markers<'a> {
    /// The markers of `shared`'s runs bucket.
    pub(in crate::shell) fn of(shared: &'a Shared) -> Self {
        Markers {
            client: &shared.client,
            js: &shared.js,
            bucket: &shared.runs,
            retention: shared.config.retention,
            in_flight: shared.config.reply_in_flight,
            seal: &shared.seal,
        }
    }

    async fn put(&self, marker: &str, value: &str, expected: u64) -> Result<Option<u64>> {
        let (js, bucket, ttl) = (self.js, self.bucket, Some(self.retention));
        runs::put_in(js, bucket, marker, value.into(), Some(expected), ttl).await
    }

    /// Takes the right to send the reply under `marker` and commits to sending it, `now`
    /// being the time (for an answerer, when the resend reached this replica): the
    /// revision to [`Markers::send`] under, or `None` when another replica has it (or had
    /// it, and its reply counts as on its way). Once it is taken, the reply must leave at
    /// once: build it first, or without I/O.
    pub(in crate::shell) async fn claim(
        &self,
        marker: &str,
        who: Claimant,
        now: SystemTime,
    ) -> Result<Option<u64>> {
        if let Some(created) = self.put(marker, SENDING, 0).await? {
            return Ok(Some(created));
        }
        let Some((value, at, revision)) = runs::written_at(self.bucket, marker).await? else {
            // Gone between the two reads (its retention ran out): start again.
            return self.put(marker, SENDING, 0).await;
        };
        let age = now.duration_since(at).unwrap_or_default();
        // Only a caller's resend (an answerer) is evidence that a reply committed to went
        // missing: a finisher running an outbox again has none, and a sender cut off
        // between its reply and its mark (a partition) had sent it.
        let free = match value.as_ref() {
            v if v == CLAIMED.as_bytes() => age >= CLAIM_GRACE,
            v if v == SENDING.as_bytes() => who == Claimant::Answerer && age >= SENDING_GRACE,
            _ => who == Claimant::Answerer && age >= self.in_flight,
        };
        if !free {
            return Ok(None);
        }
        self.put(marker, SENDING, revision).await
    }

    /// Sends a final reply (bytes and task id, as `reply::final_reply` makes them) to `to`
    /// under the right [`Markers::claim`] took at revision `committed`: publishes (with the
    /// seal's de-duplication id of `{task id}.final`, for callers that de-duplicate, or,
    /// for a caller that sent a call `token`, the id derived from it and the reply's
    /// `Mesh-Call-Mac`), and marks it sent with `status`.
    pub(in crate::shell) async fn send(
        &self,
        marker: &str,
        committed: u64,
        to: &str,
        (bytes, task_id): (Vec<u8>, String),
        status: RunStatus,
        token: Option<&str>,
    ) -> Result<()> {
        // A caller's token proves the reply and names it: a de-duplication id nobody else
        // can take first in the caller's stream.
        let mut h = async_nats::HeaderMap::new();
        let id = match token {
            Some(token) => {
                let mac = messages::call_proof::mac(token, to, &bytes);
                h.insert(messages::call_proof::CALL_MAC, mac.as_str());
                messages::call_proof::reply_msg_id(token)
            }
            None => self.seal.msg_id(&msg_id::final_reply(&task_id)),
        };
        h.insert(messages::headers::MSG_ID, id.as_str());
        self.client
            .publish_with_headers(to.to_string(), h, bytes.into())
            .await
            .context(|| format!("sending the final reply {marker}"))?;
        self.mark_sent(marker, committed, status.as_str()).await;
        Ok(())
    }

    /// Marks the reply committed at `revision` as handed to the server. Until it is, the
    /// commit is taken over after [`SENDING_GRACE`]: a mark that fails leaves the reply to
    /// be sent again then, so it is worth a warning.
    async fn mark_sent(&self, marker: &str, revision: u64, status: &str) {
        let sent = format!("sent:{status}");
        if let Err(e) = self.put(marker, &sent, revision).await {
            tracing::warn!("marking the final reply {marker} sent failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a real nats-server: the markers' compare-and-swaps are the protocol.

    use super::*;
    use futures::StreamExt;

    const IN_FLIGHT: Duration = Duration::from_secs(30);

    /// A server, a client, its JetStream and a bucket made as the runs bucket is.
    struct Bench {
        _server: test_harness::NatsServer,
        client: async_nats::Client,
        js: Context,
        bucket: kv::Store,
        seal: Seal,
    }

    async fn bench() -> Bench {
        let server = test_harness::nats();
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        let bucket = crate::shell::mesh::setup::kv_bucket(&js, "claims", 1, 1 << 20)
            .await
            .unwrap();
        Bench {
            _server: server,
            client,
            js,
            bucket,
            seal: Seal::new(b"secret"),
        }
    }

    fn markers(b: &Bench) -> Markers<'_> {
        Markers {
            client: &b.client,
            js: &b.js,
            bucket: &b.bucket,
            retention: Duration::from_secs(3600),
            in_flight: IN_FLIGHT,
            seal: &b.seal,
        }
    }

    #[tokio::test]
    async fn an_answer_first_leaves_the_finisher_nothing_to_send_however_late_it_comes() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        // A resent request met the ended run before its outbox sent the final reply.
        let mut inbox = b.client.subscribe("caller.inbox").await.unwrap();
        let claim = m.claim("r1", Claimant::Answerer, now).await.unwrap();
        let reply = (b"final".to_vec(), "t1".to_string());
        let status = RunStatus::Success;
        m.send("r1", claim.unwrap(), "caller.inbox", reply, status, None)
            .await
            .unwrap();
        let got = inbox.next().await.unwrap();
        assert_eq!(got.payload.as_ref(), b"final");
        let id = got
            .headers
            .as_ref()
            .and_then(|h| h.get(messages::headers::MSG_ID));
        let want = b.seal.msg_id(&msg_id::final_reply("t1"));
        assert_eq!(id.map(|v| v.as_str()), Some(want.as_str()));
        // The outbox runs now, or after a crash, a day later: it must not send again.
        for later in [now, now + Duration::from_secs(86_400)] {
            let claim = m.claim("r1", Claimant::Finisher, later).await.unwrap();
            assert_eq!(claim, None, "the finisher may not send after an answer");
        }
        // An answerer may send again only once the reply counts as lost.
        let soon = m.claim("r1", Claimant::Answerer, now).await.unwrap();
        assert_eq!(soon, None);
        let lost = now + IN_FLIGHT + Duration::from_secs(1);
        assert!(m
            .claim("r1", Claimant::Answerer, lost)
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn one_write_claims_and_commits_and_one_marks_sent() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        let claim = m.claim("r6", Claimant::Finisher, now).await.unwrap();
        let claim = claim.expect("the first claim");
        let (value, _, revision) = runs::written_at(&b.bucket, "r6").await.unwrap().unwrap();
        assert_eq!((value.as_ref(), revision), (SENDING.as_bytes(), claim));
        let reply = (b"final".to_vec(), "t6".to_string());
        let status = RunStatus::Failure;
        m.send("r6", claim, "caller.r6", reply, status, None)
            .await
            .unwrap();
        let (value, _, revision) = runs::written_at(&b.bucket, "r6").await.unwrap().unwrap();
        assert_eq!(value.as_ref(), b"sent:failure");
        // Two writes in all (a fresh bucket: revisions are its stream's sequence).
        assert_eq!((claim, revision), (1, 2), "a claim and a mark");
    }

    #[tokio::test]
    async fn a_claim_an_earlier_replica_left_is_taken_over_after_the_grace_and_its_commit_fails() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        // A replica of the earlier version claimed (`claimed`), to commit by a second
        // compare-and-swap at that revision.
        let slow = m.put("r2", CLAIMED, 0).await.unwrap().unwrap();
        // Within the grace the claim is its claimer's, for anyone.
        for who in [Claimant::Finisher, Claimant::Answerer] {
            assert_eq!(m.claim("r2", who, now).await.unwrap(), None, "{who:?}");
        }
        // Past it, the claimer counts as dead and another takes over...
        let later = now + CLAIM_GRACE + Duration::from_secs(1);
        let taken = m.claim("r2", Claimant::Finisher, later).await.unwrap();
        taken.expect("a stale claim is taken over");
        // ...so the claimer, only slow, finds its commit refused and sends nothing.
        assert_eq!(m.put("r2", SENDING, slow).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_reply_committed_but_never_marked_sent_is_sent_by_another_after_the_grace() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        // The sender committed, then died before its buffered reply left the process.
        m.claim("r4", Claimant::Finisher, now)
            .await
            .unwrap()
            .unwrap();
        for who in [Claimant::Finisher, Claimant::Answerer] {
            assert_eq!(m.claim("r4", who, now).await.unwrap(), None, "{who:?}");
        }
        let later = now + SENDING_GRACE + Duration::from_secs(1);
        let again = m.claim("r4", Claimant::Answerer, later).await.unwrap();
        assert!(again.is_some());
    }

    #[tokio::test]
    async fn a_reply_committed_and_not_marked_sent_is_never_sent_again_by_a_finisher() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        // The sender committed and sent, then was cut from the store's quorum (a
        // partition) before its mark: its caller has the reply.
        m.claim("r5", Claimant::Finisher, now)
            .await
            .unwrap()
            .unwrap();
        // The run's outbox run again by another replica, however late, has no evidence
        // that the reply went missing: it sends nothing.
        for later in [SENDING_GRACE, IN_FLIGHT, Duration::from_secs(86_400)] {
            let at = now + later + Duration::from_secs(1);
            let again = m.claim("r5", Claimant::Finisher, at).await.unwrap();
            assert_eq!(again, None, "a finisher {later:?} later");
        }
        // A resend that reached a replica before the grace ran out is not evidence either,
        // however late it is answered (judged at its arrival).
        assert_eq!(m.claim("r5", Claimant::Answerer, now).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_committed_reply_is_not_taken_over_by_another_finisher() {
        let b = bench().await;
        let m = markers(&b);
        let now = SystemTime::now();
        let committed = m
            .claim("r3", Claimant::Finisher, now)
            .await
            .unwrap()
            .unwrap();
        m.mark_sent("r3", committed, "success").await;
        let later = now + Duration::from_secs(86_400);
        assert_eq!(
            m.claim("r3", Claimant::Finisher, later).await.unwrap(),
            None
        );
        let (value, _, _) = runs::written_at(&b.bucket, "r3").await.unwrap().unwrap();
        assert_eq!(value.as_ref(), b"sent:success");
    }
}
