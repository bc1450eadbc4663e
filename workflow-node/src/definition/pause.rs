//! `workflow.pause`: what a paused run's clocks do. A run is paused and
//! resumed by request (`workflow-node runs pause|resume`); while paused it dispatches no new
//! call. These settings say whether the time it spends paused counts against its
//! `max_workflow_execution_time_seconds` and its approvals' `timeout`s.

use serde_json::Value;

use super::fields::Fields;
use super::problem::Sink;

/// `workflow.pause`: which clocks stop while a run is paused. Both default to false: a
/// paused run's deadline and its approvals' timeouts keep running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PauseSettings {
    /// `suspend_deadline`: the run's deadline moves later by the time it spent paused
    /// (and cannot pass while it is paused).
    pub suspend_deadline: bool,
    /// `suspend_approval_timeouts`: each waiting approval's timeout moves later by the time
    /// the run spent paused (and cannot pass while it is paused).
    pub suspend_approval_timeouts: bool,
}

/// Reads `pause` from the workflow block: absent is the default, else a mapping of the two
/// flags.
pub(super) fn parse_pause(w: &mut Fields<'_>, sink: &mut Sink) -> PauseSettings {
    let mut settings = PauseSettings::default();
    match w.get(sink, "pause", &[]) {
        None => {}
        Some(Value::Object(obj)) => {
            let mut f = Fields::new(obj, None, "pause.");
            settings.suspend_deadline = f.bool(sink, "suspend_deadline").unwrap_or(false);
            settings.suspend_approval_timeouts =
                f.bool(sink, "suspend_approval_timeouts").unwrap_or(false);
            f.finish(sink, "pause", &[]);
        }
        Some(v) => w.wrong(
            sink,
            "pause",
            "a mapping with suspend_deadline and suspend_approval_timeouts",
            v,
        ),
    }
    settings
}

#[cfg(test)]
mod tests {
    use crate::definition::parse_str;

    fn with(pause: &str) -> Result<crate::definition::Workflow, Vec<crate::definition::Problem>> {
        parse_str(
            &format!(
                "name: P\nworkflow:\n  description: d\n{pause}  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
            ),
            "p.yaml",
        )
    }

    #[test]
    fn pause_settings_default_to_clocks_that_keep_running() {
        let wf = with("").unwrap();
        assert!(!wf.pause.suspend_deadline);
        assert!(!wf.pause.suspend_approval_timeouts);
        let wf =
            with("  pause: {suspend_deadline: true, suspendApprovalTimeouts: true}\n").unwrap();
        assert!(wf.pause.suspend_deadline);
        assert!(wf.pause.suspend_approval_timeouts);
    }

    #[test]
    fn bad_pause_settings_are_named() {
        let problems = with("  pause: {suspend_deadline: 1, suspend_deadlin: true}\n").unwrap_err();
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let text = text.join("\n");
        assert!(text.contains("pause.suspend_deadline"), "{text}");
        assert!(text.contains("expected true or false, found"), "{text}");
        assert!(text.contains("unknown field 'suspend_deadlin'"), "{text}");
        let problems = with("  pause: yes\n").unwrap_err();
        assert!(
            problems[0].to_string().contains("expected a mapping"),
            "{problems:?}"
        );
    }
}
