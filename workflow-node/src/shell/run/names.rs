//! Names of the JetStream resources of a namespace: buckets, streams, and every KV key the
//! workflow node writes (the only place their shapes are spelled out).
//!
//! KV buckets and stream names allow `[A-Za-z0-9_-]`, so a namespace's dots become `_`.
//! Keys are `.`-separated and start with the run's key (`{workflow}.{execution}`), so one
//! run's entries share a prefix.

use sha2::{Digest, Sha256};

use crate::core::ExecutionId;
use crate::shell::run::envelope::Caller;

fn ns_token(ns: &str) -> String {
    ns.replace('.', "_")
}

/// The KV bucket of run records.
pub fn runs_bucket(ns: &str) -> String {
    format!("{}_wf_runs", ns_token(ns))
}

/// The KV bucket of the runs' wakes (durable timers). Its name keeps the word `timers`:
/// the bucket outlives versions of the node, and renaming it would orphan the wakes of
/// runs in flight.
pub fn wakes_bucket(ns: &str) -> String {
    format!("{}_wf_timers", ns_token(ns))
}

/// The KV bucket of workflow definitions, by content hash (`{workflow}.{hash}`).
pub fn versions_bucket(ns: &str) -> String {
    format!("{}_wf_defs", ns_token(ns))
}

/// The KV bucket of the deployment's secret (see `seal`): workflow-node users only.
pub fn secrets_bucket(ns: &str) -> String {
    format!("{}_wf_secrets", ns_token(ns))
}

/// The KV bucket of the nonces of signed requests accepted (see `callers::nonces`).
pub fn nonces_bucket(ns: &str) -> String {
    format!("{}_wf_nonces", ns_token(ns))
}

/// The KV bucket counting cancels kept for runs not started (see `callers::early`).
pub fn early_cancels_bucket(ns: &str) -> String {
    format!("{}_wf_early_cancels", ns_token(ns))
}

/// The KV bucket of the schedules' entries (see `run::schedule`), by
/// [`schedule_key`].
pub fn schedules_bucket(ns: &str) -> String {
    format!("{}_wf_schedules", ns_token(ns))
}

/// The KV bucket of the gates of the workflows' flow control (see `run::flow`), by
/// `run::flow::gate_key`.
pub fn flow_bucket(ns: &str) -> String {
    format!("{}_wf_flow", ns_token(ns))
}

/// The agents' gates bucket (see `gate`): one entry per agent with limits, by its name.
pub fn gates_bucket(ns: &str) -> String {
    format!("{}_wf_agent_gates", ns_token(ns))
}

/// The key of a schedule's entry: `{workflow}.{schedule}` (both NATS tokens).
pub fn schedule_key(workflow: &str, schedule: &str) -> String {
    format!("{workflow}.{schedule}")
}

/// The stream a node makes to capture a trigger's `subject` when the trigger names no
/// stream of its own.
pub fn trigger_stream(ns: &str, workflow: &str, trigger: &str) -> String {
    format!("{}_TRIG_{workflow}_{trigger}", ns_token(ns))
}

/// The durable consumer through which a workflow's replicas take a trigger's messages.
pub fn trigger_consumer(workflow: &str, trigger: &str) -> String {
    format!("wf_{workflow}_{trigger}")
}

/// The stream of dead letters: triggers' messages that started no run and were parked.
pub fn dead_letter_stream(ns: &str) -> String {
    format!("{}_wf_dead_letters", ns_token(ns))
}

/// The subject a trigger's dead letters are parked on: `{ns}.dead.wf.{workflow}.{trigger}`
/// (not under `{ns}.wf.`, whose `*.history.>` the history stream captures).
pub fn dead_letter_subject(ns: &str, workflow: &str, trigger: &str) -> String {
    format!("{ns}.dead.wf.{workflow}.{trigger}")
}

/// Headers a dead letter carries beside the original ones.
pub mod dead {
    /// The subject the message was published on.
    pub const SUBJECT: &str = "Mesh-Dead-Subject";
    /// Why it started no run.
    pub const REASON: &str = "Mesh-Dead-Reason";
    /// The workflow and trigger that took it: `{workflow}.{trigger}`.
    pub const TRIGGER: &str = "Mesh-Dead-Trigger";
    /// The stream it was taken from.
    pub const STREAM: &str = "Mesh-Dead-Stream";
    /// Its sequence in that stream (decimal).
    pub const SEQUENCE: &str = "Mesh-Dead-Sequence";
    /// Every header a dead letter carries beside the original ones.
    pub const ALL: [&str; 5] = [SUBJECT, REASON, TRIGGER, STREAM, SEQUENCE];
}

/// The event stream of one workflow.
pub fn event_stream(ns: &str, workflow: &str) -> String {
    format!("{}_WF_{workflow}", ns_token(ns))
}

/// The stream of every run's history (limits-based, kept for the retention).
pub fn history_stream(ns: &str) -> String {
    format!("{}_wf_history", ns_token(ns))
}

/// The durable consumer all replicas share.
pub const CONSUMER: &str = "replicas";

/// The KV key of a run.
pub fn run_key(workflow: &str, execution: &ExecutionId) -> String {
    format!("{workflow}.{execution}")
}

/// The KV key claiming the sending of a run's final reply to `caller`: one per run for
/// the caller that started it, one per reply address for callers attached later.
pub fn final_marker(workflow: &str, execution: &ExecutionId, caller: &Caller) -> String {
    match (&caller.reply_to, caller.attached) {
        (Some(reply_to), true) => {
            let digest = Sha256::digest(reply_to.as_bytes());
            format!("{workflow}.{execution}.final.{}", hex::encode(&digest[..8]))
        }
        _ => format!("{workflow}.{execution}.final"),
    }
}

/// The KV key of the run's input, stored apart from the record when it is large.
pub(crate) fn input_key(run_key: &str) -> String {
    format!("{run_key}.input")
}

/// The KV key of a node's large output, stored apart from the record.
pub(crate) fn node_output_key(run_key: &str, node: &str) -> String {
    format!("{run_key}.out.{node}")
}

/// The KV key of a run's own large output (its `output_mapping` result), stored apart.
pub(crate) fn run_output_key(run_key: &str) -> String {
    format!("{run_key}.output")
}

/// The KV key of one chunk of an map kept apart's items.
pub(crate) fn items_key(run_key: &str, map: &str, chunk: usize) -> String {
    format!("{run_key}.items.{map}.{chunk}")
}

/// The KV key of the result of item `index` of an map kept apart.
pub(crate) fn result_key(run_key: &str, map: &str, index: u32) -> String {
    format!("{run_key}.result.{map}.{index}")
}

/// The KV key of a timer.
pub fn timer_key(workflow: &str, execution: &ExecutionId, timer: &str) -> String {
    format!("{workflow}.{execution}.{timer}")
}

/// The execution id of a request: derived from the caller's task id (or message id), so
/// that the same request delivered twice names the same run, and `tasks/cancel` with that
/// id finds it.
pub fn execution_id(workflow: &str, caller_task_id: &str) -> ExecutionId {
    let digest = Sha256::digest(format!("{workflow}\n{caller_task_id}").as_bytes());
    ExecutionId(hex::encode(&digest[..16]))
}

/// The execution id of a request from `caller` (its `Mesh-Caller` header): task ids are
/// scoped by it, so two callers that pick the same task id start two runs. Without a
/// caller, the same as [`execution_id`].
///
/// The byte after the workflow's name tells the two forms apart (`\n` unscoped, `\0`
/// scoped; a workflow name has neither), and the caller's length ends it, so no caller and
/// task id pair hashes like another pair or like an unscoped task id.
pub fn caller_execution_id(
    workflow: &str,
    caller: Option<&str>,
    caller_task_id: &str,
) -> ExecutionId {
    let Some(caller) = caller.filter(|c| !c.is_empty()) else {
        return execution_id(workflow, caller_task_id);
    };
    let scoped = format!("{workflow}\0{}\0{caller}{caller_task_id}", caller.len());
    ExecutionId(hex::encode(&Sha256::digest(scoped.as_bytes())[..16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_scoped_by_their_caller() {
        let a = caller_execution_id("Wf", Some("A"), "t");
        assert_eq!(a, caller_execution_id("Wf", Some("A"), "t"));
        assert_ne!(a, caller_execution_id("Wf", Some("B"), "t"));
        assert_ne!(a, caller_execution_id("Wf", None, "t"));
        assert_ne!(a, caller_execution_id("Other", Some("A"), "t"));
        assert_ne!(
            caller_execution_id("Wf", Some("A"), "Bt"),
            caller_execution_id("Wf", Some("AB"), "t")
        );
        assert_eq!(
            caller_execution_id("Wf", None, "t"),
            execution_id("Wf", "t")
        );
        assert_eq!(
            caller_execution_id("Wf", Some(""), "t"),
            execution_id("Wf", "t")
        );
        assert!(ExecutionId::parse(&a.0).is_ok());
    }

    #[test]
    fn execution_ids_are_stable_and_valid() {
        let a = execution_id("Wf", "task-1");
        assert_eq!(a, execution_id("Wf", "task-1"));
        assert_ne!(a, execution_id("Wf", "task-2"));
        assert_ne!(a, execution_id("Other", "task-1"));
        assert!(ExecutionId::parse(&a.0).is_ok());
        assert_eq!(a.0.len(), 32);
    }

    #[test]
    fn namespaces_with_dots_make_valid_names() {
        assert_eq!(runs_bucket("acme.prod"), "acme_prod_wf_runs");
        assert_eq!(event_stream("mesh", "Wf"), "mesh_WF_Wf");
        assert_eq!(history_stream("acme.prod"), "acme_prod_wf_history");
    }

    #[test]
    fn keys_start_with_the_run_key() {
        let e = ExecutionId("e1".into());
        let run = run_key("Wf", &e);
        assert_eq!(run, "Wf.e1");
        let first = Caller {
            reply_to: Some("inbox.a".into()),
            ..Caller::default()
        };
        assert_eq!(final_marker("Wf", &e, &first), "Wf.e1.final");
        let joined = |to: &str| Caller {
            reply_to: Some(to.into()),
            attached: true,
            ..Caller::default()
        };
        let b = final_marker("Wf", &e, &joined("inbox.b"));
        assert!(b.starts_with("Wf.e1.final."), "{b}");
        assert_eq!(b, final_marker("Wf", &e, &joined("inbox.b")));
        assert_ne!(b, final_marker("Wf", &e, &joined("inbox.c")));
        assert_eq!(timer_key("Wf", &e, "deadline"), "Wf.e1.deadline");
        assert_eq!(input_key(&run), "Wf.e1.input");
        assert_eq!(items_key(&run, "m", 2), "Wf.e1.items.m.2");
        assert_eq!(result_key(&run, "m", 7), "Wf.e1.result.m.7");
    }
}
