//! The agent card of a workflow: how it appears on the mesh.
//!
//! - `url` is `nats:{ns}.a2a.v1.agent.request.{name}`, transport `NATS`, streaming on (the
//!   node publishes progress as status updates);
//! - extensions: agent type `{type: "workflow"}`; schemas `{input_schema?, output_schema?}`
//!   (left out when the file has neither); visualization `{mermaid_source, workflow_config}`
//!   where `workflow_config` is the file's `workflow` block as written; and, when the file
//!   has a `display_name`, the display-name extension `{display_name}` (the A2A card has no
//!   such field; the reference system's UI reads it from
//!   [`messages::card::EXT_DISPLAY_NAME`]).
//! - skills come from the file; missing `description` falls back to the workflow's, missing
//!   `tags` to `["workflow"]`.

use messages::card::{AgentCard, AgentSkill, AGENT_TYPE_WORKFLOW};
use messages::subjects;
use serde_json::Value;

use crate::definition::Workflow;

/// The agent card of `wf` on namespace `namespace`.
pub fn agent_card(wf: &Workflow, namespace: &str) -> AgentCard {
    let url = format!("nats:{}", subjects::agent_request(namespace, &wf.name));
    let mut card = AgentCard::new(&wf.name, &wf.description, url, &wf.version)
        .with_agent_type(AGENT_TYPE_WORKFLOW)
        .with_schemas(
            wf.input_schema.as_ref().map(|s| s.source.clone()),
            wf.output_schema.as_ref().map(|s| s.source.clone()),
        )
        .with_visualization(super::mermaid(wf), wf.source.clone());
    if let Some(display_name) = &wf.display_name {
        card = card.with_display_name(display_name);
    }
    card.skills = wf
        .skills
        .iter()
        .enumerate()
        .map(|(i, s)| skill(wf, i, s))
        .collect();
    card
}

/// One skill of the file as an A2A skill, required fields filled in.
fn skill(wf: &Workflow, index: usize, value: &Value) -> AgentSkill {
    let text = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| value.get(*k).and_then(Value::as_str))
            .map(str::to_owned)
    };
    let list = |keys: &[&str]| {
        keys.iter().find_map(|k| {
            value.get(*k).and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
        })
    };
    // A bare string is a skill named by it.
    let bare = value.as_str().map(str::to_owned);
    let id = text(&["id"])
        .or_else(|| bare.clone())
        .unwrap_or_else(|| format!("{}_skill_{}", wf.name, index + 1));
    let name = text(&["name"])
        .or(bare)
        .unwrap_or_else(|| super::mermaid::title_case(&id));
    AgentSkill {
        description: text(&["description"]).unwrap_or_else(|| {
            if wf.description.is_empty() {
                name.clone()
            } else {
                wf.description.clone()
            }
        }),
        tags: list(&["tags"]).unwrap_or_else(|| vec!["workflow".to_owned()]),
        examples: list(&["examples"]),
        input_modes: list(&["inputModes", "input_modes"]),
        output_modes: list(&["outputModes", "output_modes"]),
        id,
        name,
    }
}
