//! Commands as the outbox keeps them: without the payloads the run's state already holds.
//!
//! An outbox entry only serves a redelivered event whose commands may not have been carried
//! out, so it need not copy what the state can give back: a dispatch's input and
//! instruction (resolved again from the state, as at the dispatch), a node's output in its
//! progress, the run's input and output. What [`thin`] leaves out, [`thicken`] takes back
//! from the state, which keeps the run's entry small whatever its agents return.

use serde_json::Value;

use crate::core::{self, Command, Execution, NodeStatus, Progress, RunStatus};
use crate::definition::Workflow;

/// The commands as the outbox keeps them.
pub(in crate::shell) fn thin(commands: &[Command]) -> Vec<Command> {
    commands.iter().map(thin_one).collect()
}

fn thin_one(command: &Command) -> Command {
    match command {
        Command::Dispatch(d) => {
            let mut d = d.clone();
            d.input = Value::Null;
            d.instruction = None;
            Command::Dispatch(d)
        }
        Command::Progress(Progress::RunStarted { .. }) => {
            Command::Progress(Progress::RunStarted { input: Value::Null })
        }
        Command::Progress(Progress::NodeFinished {
            node_id,
            status,
            error,
            condition_result,
            selected_branch,
            ..
        }) => Command::Progress(Progress::NodeFinished {
            node_id: node_id.clone(),
            status: *status,
            output: None,
            error: error.clone(),
            condition_result: *condition_result,
            selected_branch: selected_branch.clone(),
        }),
        Command::Finish { status, error, .. } => Command::Finish {
            status: *status,
            output: None,
            error: error.clone(),
        },
        other => other.clone(),
    }
}

/// The commands of an outbox entry with what [`thin`] left out taken from `state`. A
/// dispatch whose attempt no longer runs is dropped: its call has ended, and sending it
/// again would only make an answer that is ignored.
pub(in crate::shell) fn thicken(
    workflow: &Workflow,
    state: &mut Execution,
    commands: Vec<Command>,
) -> Vec<Command> {
    commands
        .into_iter()
        .filter_map(|command| thicken_one(workflow, state, command))
        .collect()
}

fn thicken_one(workflow: &Workflow, state: &mut Execution, command: Command) -> Option<Command> {
    Some(match command {
        Command::Dispatch(mut d) => {
            let (input, instruction) = core::call_request(workflow, state, &d.task, d.attempt)?;
            d.input = input;
            d.instruction = instruction;
            Command::Dispatch(d)
        }
        Command::Progress(Progress::RunStarted { .. }) => Command::Progress(Progress::RunStarted {
            input: state.input.clone(),
        }),
        Command::Progress(Progress::NodeFinished {
            node_id,
            status,
            error,
            condition_result,
            selected_branch,
            ..
        }) => {
            let output = match status {
                NodeStatus::Success => state.nodes.get(&node_id).and_then(|n| n.output.clone()),
                _ => None,
            };
            Command::Progress(Progress::NodeFinished {
                node_id,
                status,
                output,
                error,
                condition_result,
                selected_branch,
            })
        }
        Command::Finish { status, error, .. } => Command::Finish {
            status,
            output: match status {
                RunStatus::Success => state.output.clone(),
                _ => None,
            },
            error,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Event, ExecutionId, Millis};
    use serde_json::json;

    fn workflow() -> Workflow {
        let yaml = r#"
name: W
workflow:
  description: two agents in a row
  nodes:
    - {id: a, type: agent, agent_name: A, input: {x: "{{workflow.input.x}}"}, instruction: "say {{workflow.input.x}}"}
    - {id: b, type: agent, agent_name: B, depends_on: [a], input: {big: "{{a.output.big}}"}}
  output_mapping: {big: "{{b.output.big}}"}
"#;
        crate::definition::parse_str(yaml, "w.yaml").expect("valid")
    }

    /// Applies events to a new run, returning its state and the last event's commands.
    fn run(wf: &Workflow, events: Vec<Event>) -> (Execution, Vec<Command>) {
        let mut state = Execution::new(ExecutionId("e".into()), "W");
        let mut commands = Vec::new();
        for (i, e) in events.into_iter().enumerate() {
            commands = core::apply(wf, &mut state, e, Millis(i as u64));
        }
        (state, commands)
    }

    fn dispatch_of(commands: &[Command]) -> core::Dispatch {
        commands
            .iter()
            .find_map(|c| match c {
                Command::Dispatch(d) => Some(d.clone()),
                _ => None,
            })
            .expect("a dispatch")
    }

    #[test]
    fn a_thinned_entry_keeps_no_payload_and_thickens_back_to_the_same_commands() {
        let wf = workflow();
        let big = "x".repeat(10_000);
        let (_, first) = run(
            &wf,
            vec![Event::Started {
                input: json!({"x": 1}),
            }],
        );
        let a = dispatch_of(&first);
        let success = Event::CallSucceeded {
            task: a.task.clone(),
            attempt: 1,
            output: json!({"big": big}),
        };
        let (mut state, commands) = run(
            &wf,
            vec![
                Event::Started {
                    input: json!({"x": 1}),
                },
                success,
            ],
        );
        let thin = thin(&commands);
        let stored = serde_json::to_string(&thin).expect("encode");
        assert!(
            !stored.contains(&big),
            "the outbox copies no output or input"
        );
        assert!(stored.len() < 2_000, "{}", stored.len());
        assert_eq!(thicken(&wf, &mut state, thin), commands);
    }

    #[test]
    fn the_run_input_instruction_and_output_come_back_from_the_state() {
        let wf = workflow();
        let (mut state, commands) = run(
            &wf,
            vec![Event::Started {
                input: json!({"x": 7}),
            }],
        );
        let d = dispatch_of(&commands);
        assert_eq!(d.instruction.as_deref(), Some("say 7"));
        assert_eq!(thicken(&wf, &mut state, thin(&commands)), commands);
        state.status = RunStatus::Success;
        state.output = Some(json!({"big": "y"}));
        let finish = vec![Command::Finish {
            status: RunStatus::Success,
            output: Some(json!({"big": "y"})),
            error: None,
        }];
        assert_eq!(thicken(&wf, &mut state, thin(&finish)), finish);
    }

    #[test]
    fn a_dispatch_whose_attempt_ended_is_not_sent_again() {
        let wf = workflow();
        let start = Event::Started {
            input: json!({"x": 1}),
        };
        let (_, first) = run(&wf, vec![start.clone()]);
        let a = dispatch_of(&first);
        let done = Event::CallSucceeded {
            task: a.task.clone(),
            attempt: 1,
            output: json!({"big": 1}),
        };
        let (mut state, _) = run(&wf, vec![start, done]);
        let kept = thin(&[Command::Dispatch(a)]);
        assert!(thicken(&wf, &mut state, kept).is_empty());
    }
}
