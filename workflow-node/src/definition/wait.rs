//! The `wait` node: the run waits for a named signal, sent from outside (`runs signal`,
//! the web view, an A2A message on the run's task, the Rust SDK, an event trigger).
//!
//! A signal is found by the run (its execution id or caller's task id) or by a key: the
//! node's `correlation` resolved when it starts waiting. Its payload must match `schema`,
//! its sender must be one of `signers` when the node lists any (checked as approvers
//! are), and the node fails `timed_out` (error kind `timeout`) after `timeout`. Problems
//! are reported with every other problem of the file.

use std::time::Duration;

use serde_json::Value;
use workflow_expr::Template;

use super::fields::Fields;
use super::problem::Sink;
use super::{Approver, Schema};

/// The longest signal name: it travels in events, message ids and the run's state.
pub const MAX_SIGNAL_NAME: usize = 64;

/// `type: wait`: the run waits for a signal.
#[derive(Debug, Clone)]
pub struct WaitNode {
    /// `signal`: the name a sender gives (letters, digits, `_`, `-`).
    pub signal: String,
    /// `correlation`: a template resolved when the node starts waiting, giving the key a
    /// signal sent by key finds the run by. `None`: the run is found by its id only.
    pub correlation: Option<Template>,
    /// `schema`: what the payload must match; a payload that does not is refused to its
    /// sender and the node goes on waiting.
    pub schema: Option<Schema>,
    /// `signers`: who may send it, each an [`Approver`] (a user key, or a name the node's
    /// config binds). Empty: whoever may steer the run.
    pub signers: Vec<String>,
    /// `timeout`: how long to wait; `None` waits until the run's deadline.
    pub timeout: Option<Duration>,
}

/// Whether `name` is a valid signal name.
pub fn valid_signal_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SIGNAL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Reads the fields of a `wait` node.
pub(super) fn parse_wait(f: &mut Fields<'_>, sink: &mut Sink) -> WaitNode {
    let signal = f.req_string(sink, "signal", &[]).unwrap_or_default();
    if !signal.is_empty() && !valid_signal_name(&signal) {
        f.problem(
            sink,
            "signal",
            format!(
                "'{signal}' is not a valid signal name: letters, digits, '_' and '-', at most \
                 {MAX_SIGNAL_NAME}"
            ),
        );
    }
    let correlation = match f.get(sink, "correlation", &[]) {
        Some(v @ Value::String(_)) => f.compile_template(sink, "correlation", v),
        Some(v) => {
            f.wrong(
                sink,
                "correlation",
                "a string (a template giving the key)",
                v,
            );
            None
        }
        None => None,
    };
    let schema = f.schema(sink, "schema");
    let signers = f.strings(sink, "signers", &[]).unwrap_or_default();
    for (i, entry) in signers.iter().enumerate() {
        if let Err(why) = Approver::parse(entry) {
            f.problem(sink, &format!("signers[{i}]"), why);
        }
    }
    let timeout = f.duration(sink, "timeout", true);
    WaitNode {
        signal,
        correlation,
        schema,
        signers,
        timeout,
    }
}

/// Reports a trigger that routes a signal no wait node of `wf` takes.
pub(super) fn check_routes(wf: &super::Workflow, sink: &mut Sink) {
    for (i, t) in wf.triggers.iter().enumerate() {
        let Some(route) = &t.signal else { continue };
        let taken = wf
            .nodes
            .iter()
            .any(|n| matches!(&n.kind, super::NodeKind::Wait(w) if w.signal == route.name));
        if !taken {
            sink.push(
                None,
                &format!("triggers[{i}].signal"),
                format!(
                    "no wait node of the workflow waits for signal '{}'",
                    route.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::definition::{parse_str, NodeKind};

    fn with(node: &str) -> Result<crate::definition::Workflow, String> {
        let yaml = format!(
            "name: W\nworkflow:\n  description: d\n  nodes:\n    - {node}\n  output_mapping: {{}}\n"
        );
        parse_str(&yaml, "").map_err(|p| {
            p.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    #[test]
    fn a_wait_node_reads_every_field() {
        let wf = with(
            "{id: w, type: wait, signal: paid, correlation: '{{workflow.input.order}}', \
             schema: {type: object, required: [amount]}, signers: [alice], timeout: 30s}",
        )
        .unwrap();
        let NodeKind::Wait(w) = &wf.nodes[0].kind else {
            panic!("not a wait node")
        };
        assert_eq!(w.signal, "paid");
        assert!(w.correlation.is_some() && w.schema.is_some());
        assert_eq!(w.signers, ["alice"]);
        assert_eq!(w.timeout, Some(std::time::Duration::from_secs(30)));
    }

    #[test]
    fn the_plan_and_the_picture_show_a_wait() {
        let wf = with(
            "{id: w, type: wait, signal: paid, correlation: '{{workflow.input.order}}', \
             signers: [alice], timeout: 30s}",
        )
        .unwrap();
        let plan = crate::visual::plan(&wf).to_string();
        assert!(plan.contains("Waits for signals"), "{plan}");
        assert!(
            plan.contains("w: signal 'paid'; found by key {{workflow.input.order}}; sent by alice; timeout 30s"),
            "{plan}"
        );
        let picture = crate::visual::mermaid(&wf);
        assert!(
            picture.contains("<b>Wait</b>") && picture.contains("signal paid"),
            "{picture}"
        );
    }

    #[test]
    fn every_problem_of_a_wait_node_is_reported_at_once() {
        let e = with(
            "{id: w, type: wait, signal: 'no way', correlation: 3, schema: 4, \
             signers: ['bad name!'], timeout: 0}",
        )
        .unwrap_err();
        for field in ["signal", "correlation", "schema", "signers[0]", "timeout"] {
            assert!(e.contains(field), "{field} missing from: {e}");
        }
        let e = with("{id: w, type: wait}").unwrap_err();
        assert!(e.contains("signal"), "{e}");
    }

    #[test]
    fn a_trigger_routes_only_a_signal_a_wait_node_takes_and_needs_a_key() {
        let yaml = "name: W\nworkflow:\n  description: d\n  triggers:\n    - {name: a, subject: x, signal: nobody, key: '{{event.payload.k}}'}\n    - {name: b, subject: y, signal: go}\n  nodes:\n    - {id: w, type: wait, signal: go}\n  output_mapping: {}\n";
        let e: Vec<String> = crate::definition::parse_str(yaml, "")
            .unwrap_err()
            .iter()
            .map(|p| p.to_string())
            .collect();
        let e = e.join("\n");
        assert!(
            e.contains("triggers[0].signal") && e.contains("'nobody'"),
            "{e}"
        );
        assert!(e.contains("triggers[1].key: missing field"), "{e}");
    }
}
