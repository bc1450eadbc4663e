//! `workflow.agents`: flow control per agent, so that a fan-out does not flood a slow or
//! rate-limited agent. For each agent name, `max_in_flight` caps its calls in flight at
//! once and `rate` (`calls` per `per`) spaces them out, across every run, replica and
//! workflow of the mesh.
//!
//! The limits are declared in the workflow file, beside the calls they restrain, because
//! that is where an author sees the fan-out; they are enforced per agent name, mesh-wide
//! (the shell's gate, `shell/run/gate.rs`): when two definitions hosted by a node
//! disagree, the smaller value of each limit applies, so that no workflow loosens a limit
//! another one needs.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::fields::{type_name, Fields};
use super::parse::is_token;
use super::problem::Sink;

/// The most agents one workflow limits.
pub const MAX_LIMITED_AGENTS: usize = 64;

/// The largest `max_in_flight` and `rate.calls`: the gate keeps one entry per agent, and
/// its holders and recent sends must fit in it.
pub const MAX_AGENT_SLOTS: u64 = 1_000;

/// The limits of one agent's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgentLimits {
    /// `max_in_flight`: most calls in flight at once; `None` is unlimited.
    pub max_in_flight: Option<u32>,
    /// `rate`: most calls started per period; `None` is unlimited.
    pub rate: Option<Rate>,
}

/// `rate`: at most `calls` calls started in any window of `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// `calls`: how many calls a window allows.
    pub calls: u32,
    /// `per`: the window.
    pub per: Duration,
}

impl AgentLimits {
    /// The tighter of two limits, limit by limit (for two definitions that disagree).
    pub fn tightest(self, other: AgentLimits) -> AgentLimits {
        let max_in_flight = match (self.max_in_flight, other.max_in_flight) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let rate = match (self.rate, other.rate) {
            // The rate that allows fewer calls per second; equal, the shorter window.
            (Some(a), Some(b)) => {
                let per_a = u128::from(a.calls) * b.per.as_millis();
                let per_b = u128::from(b.calls) * a.per.as_millis();
                Some(if per_a < per_b || (per_a == per_b && a.per <= b.per) {
                    a
                } else {
                    b
                })
            }
            (a, b) => a.or(b),
        };
        AgentLimits {
            max_in_flight,
            rate,
        }
    }

    /// One line for `plan`: `max 4 in flight, 10 calls per 1s`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.max_in_flight {
            parts.push(format!("at most {n} in flight"));
        }
        if let Some(r) = self.rate {
            parts.push(format!("{} calls per {:?}", r.calls, r.per));
        }
        parts.join(", ")
    }
}

/// Reads `agents` from the workflow block: absent is none.
pub(super) fn parse_agent_limits(
    w: &mut Fields<'_>,
    sink: &mut Sink,
) -> BTreeMap<String, AgentLimits> {
    let mut out = BTreeMap::new();
    let Some(v) = w.get(sink, "agents", &[]) else {
        return out;
    };
    let Some(obj) = v.as_object() else {
        w.wrong(sink, "agents", "a mapping from agent name to its limits", v);
        return out;
    };
    if obj.len() > MAX_LIMITED_AGENTS {
        w.problem(
            sink,
            "agents",
            format!("{} agents limited, at most {MAX_LIMITED_AGENTS}", obj.len()),
        );
    }
    for (name, limits) in obj.iter().take(MAX_LIMITED_AGENTS) {
        let field = format!("agents.{name}");
        if !is_token(name) {
            sink.push(
                None,
                &field,
                format!(
                    "'{name}' is not a valid agent name: use only letters, digits, '_' and '-'"
                ),
            );
            continue;
        }
        if let Some(l) = parse_one(limits, &field, sink) {
            out.insert(name.clone(), l);
        }
    }
    out
}

fn parse_one(v: &Value, field: &str, sink: &mut Sink) -> Option<AgentLimits> {
    let Some(obj) = v.as_object() else {
        sink.push(
            None,
            field,
            format!(
                "expected a mapping with max_in_flight and/or rate, found {}",
                type_name(v)
            ),
        );
        return None;
    };
    let prefix = format!("{field}.");
    let mut f = Fields::new(obj, None, &prefix);
    let cap = ("the largest max_in_flight", MAX_AGENT_SLOTS);
    let max_in_flight = f
        .int_at_most(sink, "max_in_flight", 1, cap)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let rate = match f.get(sink, "rate", &[]) {
        None => None,
        Some(Value::Object(r)) => {
            let mut rf = Fields::new(r, None, &format!("{prefix}rate."));
            let calls = rf
                .int_at_most(
                    sink,
                    "calls",
                    1,
                    ("the largest rate.calls", MAX_AGENT_SLOTS),
                )
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            let per = rf.duration(sink, "per", true);
            if calls.is_none() && !r.contains_key("calls") {
                rf.problem(sink, "calls", "missing field");
            }
            if per.is_none() && !r.contains_key("per") {
                rf.problem(sink, "per", "missing field");
            }
            rf.finish(sink, "rate", &[]);
            match (calls, per) {
                (Some(calls), Some(per)) if per < Duration::from_millis(1) => {
                    sink.push(None, &format!("{prefix}rate.per"), "must be at least 1ms");
                    let _ = calls;
                    None
                }
                (Some(calls), Some(per)) => Some(Rate { calls, per }),
                _ => None,
            }
        }
        Some(other) => {
            f.wrong(sink, "rate", "a mapping with calls and per", other);
            None
        }
    };
    let has_cap = obj.contains_key("max_in_flight") || obj.contains_key("maxInFlight");
    let has_rate = obj.contains_key("rate");
    f.finish(sink, "an agent's limits", &[]);
    if !has_cap && !has_rate {
        sink.push(None, field, "give max_in_flight, rate or both");
        return None;
    }
    Some(AgentLimits {
        max_in_flight,
        rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::parse_str;

    fn with(agents: &str) -> Result<crate::definition::Workflow, Vec<crate::definition::Problem>> {
        parse_str(
            &format!(
                "name: P\nworkflow:\n  description: d\n  agents: {agents}\n  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
            ),
            "p.yaml",
        )
    }

    #[test]
    fn a_cap_and_a_rate_are_read() {
        let wf = with("{A: {max_in_flight: 4, rate: {calls: 10, per: 1s}}}").expect("valid");
        let l = wf.agent_limits["A"];
        assert_eq!(l.max_in_flight, Some(4));
        assert_eq!(
            l.rate,
            Some(Rate {
                calls: 10,
                per: Duration::from_secs(1)
            })
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let problems = with(
            "{A: {max_in_flight: 0}, B: {rate: {calls: 2}}, C: {}, 'd.e': {max_in_flight: 1}, F: {max_inflight: 2}, G: 3}",
        )
        .expect_err("invalid");
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        let all = text.join("\n");
        assert!(all.contains("agents.A.max_in_flight"), "{all}");
        assert!(all.contains("agents.B.rate.per"), "{all}");
        assert!(all.contains("agents.C"), "{all}");
        assert!(all.contains("'d.e' is not a valid agent name"), "{all}");
        assert!(all.contains("agents.F.max_inflight"), "{all}");
        assert!(all.contains("agents.G"), "{all}");
        assert!(problems.len() >= 6, "{all}");
    }

    #[test]
    fn the_tightest_of_two_limits_applies_limit_by_limit() {
        let a = AgentLimits {
            max_in_flight: Some(4),
            rate: None,
        };
        let b = AgentLimits {
            max_in_flight: Some(8),
            rate: Some(Rate {
                calls: 10,
                per: Duration::from_secs(1),
            }),
        };
        let c = a.tightest(b);
        assert_eq!(c.max_in_flight, Some(4));
        assert_eq!(c.rate.map(|r| r.calls), Some(10));
        let slow = Rate {
            calls: 5,
            per: Duration::from_secs(1),
        };
        let d = c.tightest(AgentLimits {
            max_in_flight: None,
            rate: Some(slow),
        });
        assert_eq!(d.rate, Some(slow));
    }
}
