//! The agent card the A2A door serves for one workflow or agent of the mesh, at
//! `/a2a/{name}/.well-known/agent-card.json`: the mesh card's description, skills and
//! extensions, with what this door serves and nothing more.
//!
//! - `url` is the door's JSON-RPC endpoint for the name, `preferredTransport` `JSONRPC`,
//!   `additionalInterfaces` that pair again (0.3 asks for it) and the NATS binding the
//!   mesh card names (`docs/protocol.md`).
//! - 1.0's `supportedInterfaces` lists the endpoint once per version served (1.0 first,
//!   the SDKs' preference, then 0.3) and then NATS; a 1.0 client reads that, a 0.3 client
//!   `url` and `protocolVersion`.
//! - Capabilities are the door's: streaming (SSE) is served, push notifications for a
//!   workflow (whose runs are kept), not for an agent; no state-transition history.
//! - With tokens on, a `bearer` HTTP scheme is required (`securitySchemes` and `security`,
//!   1.0's `securityRequirements`).

use messages::card::AgentCard;
use serde_json::{json, Value};

/// The protocol binding URI the cards give the NATS binding (`docs/protocol.md`).
pub(super) const NATS_BINDING: &str = "NATS";

/// The card of `card`'s callee as served at `base` (`http://host/a2a/{name}`).
pub(super) fn http_card(card: &AgentCard, base: &str, tokens: bool) -> Value {
    let mut capabilities = json!({
        "streaming": true,
        // An agent's task is not kept: push is served for workflows' tasks only.
        "pushNotifications": card.is_workflow(),
        "stateTransitionHistory": false,
    });
    if !card.capabilities.extensions.is_empty() {
        capabilities["extensions"] = json!(card.capabilities.extensions);
    }
    let mut v = json!({
        "protocolVersion": "0.3.0",
        "name": card.name,
        "description": card.description,
        "version": card.version,
        "url": base,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": base, "transport": "JSONRPC"},
            {"url": card.url, "transport": NATS_BINDING},
        ],
        "supportedInterfaces": [
            {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": base, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": card.url, "protocolBinding": NATS_BINDING, "protocolVersion": "0.3"},
        ],
        "capabilities": capabilities,
        "defaultInputModes": card.default_input_modes,
        "defaultOutputModes": card.default_output_modes,
        "skills": card.skills,
        "supportsAuthenticatedExtendedCard": false,
    });
    if tokens {
        v["securitySchemes"] = json!({"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "a token of the HTTP side: a read token may get and resubscribe, \
                            an operator token may also send and cancel"}});
        v["security"] = json!([{"bearer": []}]);
        v["securityRequirements"] = json!([{"schemes": {"bearer": {"list": []}}}]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_claims_what_the_door_serves() {
        let card = AgentCard::new("A", "d", "nats:mesh.a2a.v1.agent.request.A", "1");
        let v = http_card(&card, "http://h/a2a/A", false);
        assert_eq!(v["capabilities"]["pushNotifications"], false, "an agent's");
        let mut card = AgentCard::new("W", "d", "nats:mesh.a2a.v1.agent.request.W", "1");
        card.set_extension(messages::card::AgentExtension {
            uri: messages::card::EXT_AGENT_TYPE.into(),
            description: None,
            required: None,
            params: Some(serde_json::from_value(json!({"type": "workflow"})).unwrap()),
        });
        let v = http_card(&card, "http://h/a2a/W", false);
        assert_eq!(v["url"], "http://h/a2a/W");
        assert_eq!(v["preferredTransport"], "JSONRPC");
        assert_eq!(v["capabilities"]["streaming"], true);
        assert_eq!(v["capabilities"]["pushNotifications"], true);
        assert!(v.get("securitySchemes").is_none());
        let v = http_card(&card, "http://h/a2a/W", true);
        assert_eq!(v["securitySchemes"]["bearer"]["scheme"], "bearer");
    }
}
