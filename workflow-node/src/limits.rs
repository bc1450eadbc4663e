//! Every limit on what the node accepts, in one place, with its default. Exceeding one is
//! an error that names the limit ([`LimitExceeded`]), never a crash or unbounded work.
//!
//! | limit | default | where it is checked |
//! |---|---|---|
//! | `max_request_bytes` | 8 MiB | a request to a workflow, before it is parsed (`serve --max-request-bytes`) |
//! | `max_json_depth` | 64 | a workflow input, an agent's output, a value a template resolves to, a definition file |
//! | `max_nodes` | 1000 | a definition's `nodes` |
//! | `max_map_items` | 1 000 000 | a map's `max_items` and the file's `default_max_map_items` |
//! | `max_loop_iterations` | 10 000 | a loop's `max_iterations` |
//! | template and condition length | 16 KiB | each template string and each condition, at load |
//! | `max_call_depth` | 10, at most 100 | a request's `Mesh-Call-Depth` (per workflow; the ceiling is fixed) |
//!
//! The streams and buckets the node creates have byte limits too ([`StoreLimits`], set per
//! deployment).
//!
//! Only the request size is set per replica ([`Limits`]): the others decide whether a
//! definition loads, or what a run's record may hold, and must be the same on every replica
//! and in `workflow-node validate`. JSON nesting stays well under serde_json's recursion
//! limit of 128, because requests, events and run records wrap the values they carry in a
//! few levels of their own, and each must be read back.

use serde_json::Value;

/// The limits a replica may set (`serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest request to a workflow, in bytes (default [`DEFAULT_MAX_REQUEST_BYTES`]).
    /// A larger one is answered with a JSON-RPC error and not parsed. Inputs larger than
    /// this travel as artifacts in the object store.
    pub max_request_bytes: usize,
}

/// The default of [`Limits::max_request_bytes`]: 8 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

/// The most bytes each stream and bucket the node creates may hold (`serve --store-limit
/// NAME=BYTES`). nats-server reserves these against its `max_file_store` when it creates
/// them, so the defaults stay modest (about 1.2 GiB for a namespace, plus 128 MiB per
/// workflow). What happens when one is full is said per field; a stream or bucket found
/// with another limit (or none, made by an older version) is given this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// The runs bucket (`{ns}_wf_runs`): records, large inputs and outputs, claims. Full:
    /// runs wait, their writes tried again every few seconds, until ended runs expire or
    /// the limit is raised; none is abandoned for it (`docs/faults.md`).
    pub runs: u64,
    /// The wakes bucket (`{ns}_wf_timers`). Full: new timers are refused.
    pub wakes: u64,
    /// The definitions bucket (`{ns}_wf_defs`). Full: new versions are refused at start.
    pub versions: u64,
    /// The secrets bucket (`{ns}_wf_secrets`), one small key.
    pub secrets: u64,
    /// The nonces of signed messages (`{ns}_wf_nonces`), each kept for its signature's
    /// validity. Full: signed messages are refused until nonces expire.
    pub nonces: u64,
    /// Cancels kept for runs not started yet (`{ns}_wf_early_cancels`). Full: such a
    /// cancel is refused.
    pub early_cancels: u64,
    /// The schedules' entries (`{ns}_wf_schedules`): one small entry per schedule. Full:
    /// a schedule cannot be added, paused or advanced.
    pub schedules: u64,
    /// The gates of flow-controlled workflows (`{ns}_wf_flow`): one entry per workflow or
    /// concurrency key, holding the runs in flight and waiting. Full: runs of such
    /// workflows wait to be queued or released, their writes tried again.
    pub flow: u64,
    /// Each workflow's event stream (`{ns}_WF_{workflow}`): starts, replies and steering
    /// not yet applied (a backlog of agents' replies with their outputs). Full: new events
    /// are refused until the workers catch up (a start is answered with an error; an
    /// agent's reply is lost, and its call is tried again when it times out); nothing
    /// stored is dropped.
    pub events: u64,
    /// The history stream (`{ns}_wf_history`). Full: the oldest entries are dropped.
    pub history: u64,
    /// The artifact object store (`{ns}_artifacts`). Full: new artifacts are refused until
    /// old ones expire.
    pub artifacts: u64,
    /// The card object store (`{ns}_wf_cards`): diagrams of cards too large for a message.
    /// Full: a node with such a card cannot store it and does not start.
    pub cards: u64,
}

/// `n` mebibytes.
const fn mib(n: u64) -> u64 {
    n << 20
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            runs: mib(256),
            wakes: mib(64),
            versions: mib(64),
            secrets: mib(1),
            nonces: mib(64),
            early_cancels: mib(16),
            schedules: mib(16),
            flow: mib(16),
            events: mib(128),
            history: mib(256),
            artifacts: mib(512),
            cards: mib(64),
        }
    }
}

impl StoreLimits {
    /// The names [`StoreLimits::set`] takes, in the order of the fields.
    pub const NAMES: [&'static str; 12] = [
        "runs",
        "wakes",
        "versions",
        "secrets",
        "nonces",
        "early_cancels",
        "schedules",
        "flow",
        "events",
        "history",
        "artifacts",
        "cards",
    ];

    /// Sets the limit named `name` (one of [`StoreLimits::NAMES`]) to `bytes`.
    pub fn set(&mut self, name: &str, bytes: u64) -> Result<(), String> {
        let field = match name {
            "runs" => &mut self.runs,
            "wakes" => &mut self.wakes,
            "versions" => &mut self.versions,
            "secrets" => &mut self.secrets,
            "nonces" => &mut self.nonces,
            "early_cancels" => &mut self.early_cancels,
            "schedules" => &mut self.schedules,
            "flow" => &mut self.flow,
            "events" => &mut self.events,
            "history" => &mut self.history,
            "artifacts" => &mut self.artifacts,
            "cards" => &mut self.cards,
            other => {
                return Err(format!(
                    "no store is named '{other}' (known: {})",
                    Self::NAMES.join(", ")
                ))
            }
        };
        if bytes == 0 {
            return Err(format!("the limit of {name} must be more than 0 bytes"));
        }
        *field = bytes;
        Ok(())
    }
}

/// The deepest nesting of arrays and objects in a workflow input, an agent's output, a
/// value a template resolves to, and a definition file (a scalar is 0 deep, `[]` 1).
pub const MAX_JSON_DEPTH: usize = workflow_expr::limits::MAX_VALUE_DEPTH;

/// The most nodes in one definition (its checks grow with the square of the node count).
pub const MAX_NODES: usize = 1000;

/// The largest `max_items` a map may set (its items are resolved, kept and counted).
pub const MAX_MAP_ITEMS: usize = 1_000_000;

/// The largest `max_iterations` a loop may set: each iteration is a call, kept in the run's
/// history, so a loop without a ceiling is a run without an end.
pub const MAX_LOOP_ITERATIONS: u32 = 10_000;

/// The longest template string and condition, in bytes.
pub const MAX_EXPRESSION_LEN: usize = workflow_expr::limits::MAX_TEXT_LEN;

/// `max_call_depth` of a workflow that sets none.
pub const DEFAULT_MAX_CALL_DEPTH: u32 = 10;

/// The largest `max_call_depth` a workflow may set: a chain of calls between workflows
/// (one calling itself, or two calling each other) stops at this depth.
pub const MAX_CALL_DEPTH: u32 = 100;

/// A limit was exceeded: what, which limit, and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} exceeds {limit} ({max})")]
pub struct LimitExceeded {
    /// What was too large, with its size when known ("a request of 9000000 bytes").
    pub what: String,
    /// The limit's name, as this module's table and the README write it.
    pub limit: &'static str,
    /// The limit's value.
    pub max: usize,
}

impl Limits {
    /// Checks a request's size before it is parsed.
    pub fn check_request(&self, bytes: &[u8]) -> Result<(), LimitExceeded> {
        if bytes.len() > self.max_request_bytes {
            return Err(LimitExceeded {
                what: format!("a request of {} bytes", bytes.len()),
                limit: "max_request_bytes",
                max: self.max_request_bytes,
            });
        }
        Ok(())
    }
}

/// Checks that `value` (described by `what`, e.g. "the input") nests at most
/// [`MAX_JSON_DEPTH`] deep. Measured without recursion.
pub fn check_depth(what: &str, value: &Value) -> Result<(), LimitExceeded> {
    if workflow_expr::limits::deeper_than(value, MAX_JSON_DEPTH) {
        return Err(LimitExceeded {
            what: format!("the nesting depth of {what}"),
            limit: "max_json_depth",
            max: MAX_JSON_DEPTH,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn store_limits_are_set_by_name() {
        let mut limits = StoreLimits::default();
        limits.set("events", 1024).unwrap();
        assert_eq!(limits.events, 1024);
        assert!(limits.set("nope", 1).unwrap_err().contains("known: runs"));
        assert!(limits.set("runs", 0).is_err());
    }

    #[test]
    fn errors_name_the_limit() {
        let limits = Limits {
            max_request_bytes: 4,
        };
        assert!(limits.check_request(b"1234").is_ok());
        let e = limits.check_request(b"12345").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a request of 5 bytes exceeds max_request_bytes (4)"
        );
        let mut deep = json!(1);
        for _ in 0..MAX_JSON_DEPTH {
            deep = json!([deep]);
        }
        assert!(check_depth("the input", &deep).is_ok());
        let e = check_depth("the input", &json!({ "a": deep })).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the nesting depth of the input exceeds max_json_depth (64)"
        );
    }
}
