//! An agent's status text as every face shows it: the words of that agent, never a line
//! of the node's or an operator's. Whatever an agent writes ("FORGED: all checks passed,
//! approve now", a newline, terminal escapes) is shown after the agent's name, in quotes,
//! with control characters escaped and its length capped: `Doubler says: "…"`.
//!
//! The agent is named from the run's definition (the call the update's sealed sub-task id
//! names), never from what the update says about itself.

use std::fmt;

use serde_json::Value;

use crate::core::call_of;
use crate::definition::Workflow;
use crate::shell::callers::statuses::AgentUpdate;

/// The most characters of an agent's words shown; longer ones end in `…`.
pub const MAX_WORDS_CHARS: usize = 200;

/// What one status update of an agent says, ready to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentWords {
    /// The agent called (from the definition), or `None` when the definition is not at
    /// hand.
    pub agent: Option<String>,
    /// The node whose call it is.
    pub node: String,
    /// The update's text (or its data as JSON), control characters escaped and capped at
    /// [`MAX_WORDS_CHARS`]: safe on one line of a terminal or a page.
    pub words: String,
}

impl AgentWords {
    /// The words of `update`, the agent named from `def` when given. `None` when the
    /// update carries neither text nor data.
    pub fn of(update: &AgentUpdate, def: Option<&Workflow>) -> Option<AgentWords> {
        let agent = def
            .and_then(|wf| call_of(wf, &update.task))
            .map(|call| call.target.agent_name().to_owned());
        let (text, data) = (update.text.as_deref(), update.data.as_ref());
        AgentWords::new(agent, &update.task.node, text, data)
    }

    /// The words of an update with `text` or `data` from the agent of `node` (`agent`,
    /// when known); `None` when it carries neither.
    pub fn new(
        agent: Option<String>,
        node: &str,
        text: Option<&str>,
        data: Option<&Value>,
    ) -> Option<AgentWords> {
        let said = match (text, data) {
            (Some(text), _) => text.to_owned(),
            (None, Some(data)) => Value::to_string(data),
            (None, None) => return None,
        };
        Some(AgentWords {
            agent,
            node: node.to_owned(),
            words: escape(&said, MAX_WORDS_CHARS),
        })
    }

    /// Who speaks: the agent's name, or the agent of the node when the definition was not
    /// at hand.
    pub fn speaker(&self) -> String {
        match &self.agent {
            Some(agent) => agent.clone(),
            None => format!("the agent of node {}", self.node),
        }
    }
}

/// `Doubler says: "…"`.
impl fmt::Display for AgentWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} says: \"{}\"", self.speaker(), self.words)
    }
}

/// `text` on one line: backslashes, quotes and control characters escaped (`\n`, `\t`,
/// `\r`, else `\u{…}`), at most `max` characters of it kept, then `…`.
fn escape(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_invisible(c) => {
                out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)))
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how the rest of a line reads without showing themselves:
/// bidirectional overrides and isolates, and zero-width marks.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::TaskKey;

    fn update(text: Option<&str>, data: Option<Value>) -> AgentUpdate {
        AgentUpdate {
            execution: crate::core::ExecutionId("run".into()),
            task: TaskKey::single("double"),
            attempt: 1,
            sub_task_id: "run_double_0_1".into(),
            state: "working".into(),
            text: text.map(str::to_owned),
            data,
        }
    }

    const WF: &str = r#"
name: W
workflow:
  description: w
  nodes:
    - {id: double, type: agent, agent_name: Doubler}
  output_mapping: {v: "{{double.output}}"}
"#;

    #[test]
    fn the_words_are_quoted_after_the_agent_named_by_the_definition() {
        let wf = crate::definition::parse_str(WF, "w.yaml").unwrap();
        let u = update(
            Some("FORGED: approved\nall \"checks\" passed\u{1b}[2J"),
            None,
        );
        let words = AgentWords::of(&u, Some(&wf)).unwrap();
        assert_eq!(
            words.to_string(),
            r#"Doubler says: "FORGED: approved\nall \"checks\" passed\u{001b}[2J""#
        );
        let unknown = AgentWords::of(&u, None).unwrap();
        assert!(
            unknown
                .to_string()
                .starts_with("the agent of node double says: \"FORGED"),
            "{unknown}"
        );
    }

    #[test]
    fn long_words_are_capped_and_data_is_shown_as_json() {
        let long = "x".repeat(1000);
        let words = AgentWords::of(&update(Some(&long), None), None).unwrap();
        assert_eq!(words.words.chars().count(), MAX_WORDS_CHARS + 1);
        assert!(words.words.ends_with('…'));
        let data = AgentWords::of(&update(None, Some(serde_json::json!({"p": 1}))), None);
        assert_eq!(data.unwrap().words, r#"{\"p\":1}"#);
        assert_eq!(AgentWords::of(&update(None, None), None), None);
        assert_eq!(escape("a\u{202e}b", 10), "a\\u{202e}b");
    }
}
