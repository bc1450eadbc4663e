//! De-duplication ids (the [`crate::headers::MSG_ID`] header) of what a workflow node
//! publishes into JetStream streams. JetStream drops a second message with the same id
//! within the stream's duplicate window, so each id names the *fact*, never the attempt to
//! publish it: a replica that retries, or that repeats another's work after a crash,
//! publishes the same id and the fact is stored once. Each kind has its own first token
//! (`start`, `cancel`, `approval`, `timer`) or last one (`nocard`, `final`).
//!
//! These are the readable facts. A workflow node publishes each followed by a tag that
//! only its replicas can make (an HMAC under the deployment secret: the node's
//! `Seal::msg_id`), since a run's stream also takes agents' replies and JetStream
//! de-duplicates ids across the stream: a bare fact could be published first by anyone
//! who may write there, and the real event would be dropped.

/// A run's start event: one per execution id, however often the request is redelivered.
pub fn run_start(execution: &str) -> String {
    format!("start.{execution}")
}

/// A `tasks/cancel` of a run, by the key that signed it (`None`: unsigned): a run is
/// cancelled once per identity. Per identity, so that a cancel kept for a start and then
/// set aside (sent by another identity than the start's) does not shadow the real one.
pub fn run_cancel(execution: &str, signer: Option<&str>) -> String {
    match signer {
        Some(key) => format!("cancel.{execution}.{key}"),
        None => format!("cancel.{execution}"),
    }
}

/// A pause or resume (`action`) of a run, by the request that asked it (`request`: its
/// message id): each request is one fact, so a pause after a resume is not dropped.
pub fn run_control(execution: &str, action: &str, request: &str) -> String {
    format!("{action}.{execution}.{request}")
}

/// The decision on `node`'s approval gate in a run: the first decision wins, later ones
/// are dropped.
pub fn approval_decision(execution: &str, node: &str) -> String {
    format!("approval.{execution}.{node}")
}

/// A signal into a run, by its id (the sender's `signal_id`, or one the node made): the
/// same signal sent twice is stored once.
pub fn signal(execution: &str, signal_id: &str) -> String {
    format!("signal.{execution}.{signal_id}")
}

/// A durable timer's firing: its KV key and its deadline (ms since the epoch), so that a
/// timer re-armed for a later deadline fires again.
pub fn timer_fired(timer_key: &str, at_ms: u64) -> String {
    format!("timer.{timer_key}.{at_ms}")
}

/// A caller joining a run by sending its request again, named by the key that holds the
/// claim on that caller's final reply: one join per run and reply address.
pub fn run_attach(final_marker: &str) -> String {
    format!("attach.{final_marker}")
}

/// The admission of a queued run to a slot of its workflow's flow control: every replica
/// that publishes it for the run gives the same id, so the stream keeps one.
pub fn run_admitted(execution: &str) -> String {
    format!("admitted.{execution}")
}

/// The abandonment of a queued run refused because too many runs wait at its gate.
pub fn run_refused(execution: &str) -> String {
    format!("refused.{execution}")
}

/// The failure event of a call whose agent has no card on the mesh.
pub fn no_card(sub_task_id: &str) -> String {
    format!("{sub_task_id}.nocard")
}

/// A run's final reply to its caller (the task id the caller gave, or the execution id):
/// a caller whose reply subject is a stream stores it once.
pub fn final_reply(task_id: &str) -> String {
    format!("{task_id}.final")
}

/// The history entry of the `n`th event applied to a run (`n` counts the run's commits):
/// a replica that carries out an outbox entry again publishes the same entry once.
pub fn history(execution: &str, n: u64) -> String {
    format!("history.{execution}.{n}")
}

/// The de-duplication id of the history entries `first..=last` of a run, published as one
/// message.
pub fn history_batch(execution: &str, first: u64, last: u64) -> String {
    format!("history.{execution}.{first}-{last}")
}

/// A call's wait for its agent's slot (the gate was full when it was to be sent): one per
/// sub-task id, however often it is found waiting.
pub fn slot_waiting(sub_task_id: &str) -> String {
    format!("{sub_task_id}.slotwait")
}

/// The slot its agent's gate handed to a waiting call: one per sub-task id, however often
/// the release that granted it is carried out.
pub fn slot_granted(sub_task_id: &str) -> String {
    format!("{sub_task_id}.slotgrant")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_documented_shape() {
        assert_eq!(run_start("e1"), "start.e1");
        assert_eq!(run_cancel("e1", None), "cancel.e1");
        assert_eq!(run_cancel("e1", Some("UKEY")), "cancel.e1.UKEY");
        assert_eq!(approval_decision("e1", "gate"), "approval.e1.gate");
        assert_eq!(timer_fired("Wf.e1.deadline", 42), "timer.Wf.e1.deadline.42");
        assert_eq!(no_card("e1_a_x_1"), "e1_a_x_1.nocard");
        assert_eq!(final_reply("t1"), "t1.final");
        assert_eq!(history("e1", 3), "history.e1.3");
    }
}
