//! Per-node error policy: what a node's failure does to the rest of the
//! run once its retries are spent.
//!
//! Two spellings are read, on any node:
//!
//! - `on_failure: halt | continue | skip_dependents` (seed 001 writes `on_failure:
//!   continue`; its `abort` is read as `halt`);
//! - `error_policy: {on_failure: ...}` (seed 000's stage-level block).
//!
//! The `workflow` block may give the default for every node as `error_policy: {on_failure:
//! ...}` (seed 000's `on_stage_failure` is read as the same field). Without any, a node
//! halts the run as it always did.

use serde_json::Value;

use super::fields::Fields;
use super::problem::Sink;
use super::{Node, NodeRole, Workflow};

/// What a node's failure (after its retries) does to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// The run fails: its error names the node, its dependents are skipped, and with
    /// `fail_fast` no new work starts (the behaviour without a policy).
    #[default]
    Halt,
    /// The failure is recorded (status `failure` or `timed_out`, output `null`) and the
    /// run goes on: its dependents run and may branch on `{{id.status}}`.
    Continue,
    /// The failure is recorded and every node that depends on it, directly or not, is
    /// skipped; the rest of the run goes on.
    SkipDependents,
}

impl OnFailure {
    /// The policy as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Halt => "halt",
            OnFailure::Continue => "continue",
            OnFailure::SkipDependents => "skip_dependents",
        }
    }

    fn parse(text: &str) -> Result<OnFailure, String> {
        match text {
            "halt" | "abort" => Ok(OnFailure::Halt),
            "continue" => Ok(OnFailure::Continue),
            "skip_dependents" | "skipDependents" => Ok(OnFailure::SkipDependents),
            "retry" => Err("'retry' is not a failure policy here: give the node a \
                 retry_strategy; on_failure decides what happens once its retries are spent \
                 (halt, continue or skip_dependents)"
                .into()),
            "rollback" => Err("'rollback' is not supported (expected halt, continue or \
                 skip_dependents; use on_exit handlers for clean-up)"
                .into()),
            other => Err(format!(
                "expected halt, continue or skip_dependents, found '{other}'"
            )),
        }
    }
}

/// Reads a node's `on_failure` and `error_policy` (only one may be given).
pub(crate) fn parse_node_policy(f: &mut Fields<'_>, sink: &mut Sink) -> Option<OnFailure> {
    let direct = f.get(sink, "on_failure", &[]);
    let block = f.get(sink, "error_policy", &[]);
    let direct = direct.and_then(|v| policy_value(f, sink, "on_failure", v));
    let block = block.and_then(|v| block_policy(f, sink, v, "on_failure", &[]));
    if direct.is_some() && block.is_some() {
        f.problem(
            sink,
            "on_failure",
            "give on_failure or error_policy.on_failure, not both",
        );
    }
    direct.or(block)
}

/// Reads the `workflow` block's `error_policy`: the default for every node.
pub(crate) fn parse_workflow_policy(w: &mut Fields<'_>, sink: &mut Sink) -> Option<OnFailure> {
    let block = w.get(sink, "error_policy", &[])?;
    block_policy(w, sink, block, "on_failure", &["on_stage_failure"])
}

fn policy_value(f: &Fields<'_>, sink: &mut Sink, field: &str, v: &Value) -> Option<OnFailure> {
    let Some(text) = v.as_str() else {
        f.wrong(
            sink,
            field,
            "a string (halt, continue or skip_dependents)",
            v,
        );
        return None;
    };
    match OnFailure::parse(text) {
        Ok(p) => Some(p),
        Err(why) => {
            f.problem(sink, field, why);
            None
        }
    }
}

/// `error_policy: {on_failure: ...}`: the block must be a mapping with that one field.
fn block_policy(
    outer: &Fields<'_>,
    sink: &mut Sink,
    v: &Value,
    field: &str,
    aliases: &[&str],
) -> Option<OnFailure> {
    let Some(obj) = v.as_object() else {
        outer.wrong(sink, "error_policy", "a mapping", v);
        return None;
    };
    let prefix = outer.field("error_policy.");
    let mut inner = Fields::new(obj, outer.node(), &prefix);
    let policy = match inner.get(sink, field, aliases) {
        Some(v) => policy_value(&inner, sink, field, v),
        None => {
            inner.problem(sink, field, "missing field");
            None
        }
    };
    let hint = "the error_policy block (retries are retry_strategy, timeouts timeout)";
    inner.finish(sink, hint, &[]);
    policy
}

/// Checks the policies against the nodes' roles: `skip_dependents` means nothing where a
/// node has no dependents (a map's or loop's inner node, an exit handler).
pub(crate) fn check(wf: &Workflow, sink: &mut Sink) {
    for (i, node) in wf.nodes.iter().enumerate() {
        if node.on_failure != Some(OnFailure::SkipDependents) {
            continue;
        }
        let role = wf.graph.roles.get(i).copied().unwrap_or(NodeRole::Main);
        let what = match role {
            NodeRole::Main => continue,
            NodeRole::Inner { .. } => "a map's or loop's inner node",
            NodeRole::ExitHandler => "an exit handler",
        };
        sink.push(
            Some(&node.id),
            "on_failure",
            format!(
                "skip_dependents does not apply to {what}: it has no dependents (use \
                 continue or halt)"
            ),
        );
    }
}

impl Workflow {
    /// The policy that applies to `node`: its own, else the workflow's default.
    pub fn on_failure_of(&self, node: &Node) -> OnFailure {
        node.on_failure.unwrap_or(self.on_failure)
    }
}
