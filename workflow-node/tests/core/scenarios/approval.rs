//! Approval nodes.

use super::*;

pub(crate) const APPROVAL: &str = r#"
name: A
workflow:
  description: d
  nodes:
    - {id: gate, type: approval, approvers: [alice], message: "ship {{workflow.input.v}}?", EXTRA}
    - {id: ship, type: agent, agent_name: Echo, depends_on: [gate], input: {}}
  output_mapping: {gate: "{{gate.output}}"}
"#;

pub(crate) fn decide(approved: bool, by: &str) -> Event {
    Event::ApprovalDecided {
        node: "gate".into(),
        approved,
        by: Some(by.into()),
        comment: Some("ok".into()),
    }
}

#[test]
fn an_approval_waits_for_an_allowed_approver() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1h"));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.at(ms(10), decide(true, "mallory"));
    sim.at(ms(20), decide(true, "alice"));
    let out = sim.run(json!({"v": 2}));
    assert_eq!(out.status, Some(RunStatus::Success));
    assert_eq!(
        out.output,
        Some(json!({"gate": {"approved": true, "by": "alice", "comment": "ok"}}))
    );
    let asked = sim.commands.iter().find_map(|c| match c {
        Command::RequestApproval { message, .. } => message.clone(),
        _ => None,
    });
    assert_eq!(asked.as_deref(), Some("ship 2?"));
}

#[test]
fn a_rejected_approval_fails_the_run() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1h"));
    let mut sim = Sim::new(&w).agent("Echo", echo);
    sim.at(ms(10), decide(false, "alice"));
    let out = sim.run(json!({}));
    assert!(out.error.unwrap().message.contains("rejected by alice: ok"));
    assert_eq!(status(&sim, "ship"), NodeStatus::Skipped);
}

#[test]
fn an_approval_timeout_applies_on_timeout() {
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1m, on_timeout: approve"));
    let out = Sim::new(&w).agent("Echo", echo).run(json!({}));
    assert_eq!(out.status, Some(RunStatus::Success));
    let w = wf(&APPROVAL.replace("EXTRA", "timeout: 1m"));
    let out = Sim::new(&w).agent("Echo", echo).run(json!({}));
    assert!(out
        .error
        .unwrap()
        .message
        .contains("no decision within 60 s"));
}
