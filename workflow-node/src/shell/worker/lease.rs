//! Leases on the events a replica holds. Every event pulled and not yet acked, whether it
//! waits in a worker's queue or is being processed, is kept alive with an in-progress ack
//! every half ack wait, so the stream does not hand it to another replica while this one
//! still means to process it. A replica that dies stops renewing, and its events go to
//! the others after one ack wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::Subject;

/// The ack subjects of the events in hand.
#[derive(Default)]
pub(in crate::shell) struct Leases {
    next: AtomicU64,
    held: Mutex<HashMap<u64, Subject>>,
}

/// The in-progress ack (JetStream's `+WPI`): resets the event's ack wait.
const IN_PROGRESS: &str = "+WPI";

impl Leases {
    /// Starts renewing the lease of `msg`; returns the handle to [`Leases::release`] it
    /// with once the event is acked or given back.
    pub(in crate::shell) fn hold(&self, msg: &async_nats::Message) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(reply) = &msg.reply {
            self.lock().insert(id, reply.clone());
        }
        id
    }

    /// Stops renewing a lease.
    pub(in crate::shell) fn release(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// How many events are held.
    #[cfg(test)]
    pub(in crate::shell) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Subject>> {
        // A panic while holding the lock cannot leave the map inconsistent.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renews every held lease each `every`, until the task is aborted.
    pub(in crate::shell) async fn renew(
        self: Arc<Self>,
        client: async_nats::Client,
        every: Duration,
    ) {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let subjects: Vec<Subject> = self.lock().values().cloned().collect();
            for subject in subjects {
                if let Err(e) = client.publish(subject, IN_PROGRESS.into()).await {
                    tracing::debug!("renewing an event's lease failed: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(reply: Option<&str>) -> async_nats::Message {
        async_nats::Message {
            subject: "s".into(),
            reply: reply.map(Subject::from),
            payload: Default::default(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn held_leases_are_released_by_handle() {
        let leases = Leases::default();
        let a = leases.hold(&message(Some("$JS.ACK.a")));
        let b = leases.hold(&message(Some("$JS.ACK.b")));
        assert_ne!(a, b);
        assert_eq!(leases.len(), 2);
        leases.release(a);
        assert_eq!(leases.len(), 1);
        leases.release(a);
        assert_eq!(leases.len(), 1, "releasing twice is harmless");
        // A message without an ack subject has nothing to renew.
        leases.hold(&message(None));
        assert_eq!(leases.len(), 1);
    }
}
