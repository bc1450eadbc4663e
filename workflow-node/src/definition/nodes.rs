//! Reading one node of `workflow.nodes` (and the retry strategies and calls inside it).
//! A failed field is recorded as a problem and replaced by a placeholder, so that the
//! node's id and references still take part in the graph checks.

use serde_json::Value;
use workflow_expr::Condition;

use super::fields::{type_name, Fields};
use super::parse::{is_token, map_items_limit};
use super::problem::Sink;
use super::{
    ApprovalNode, Approver, Backoff, Call, CallTarget, ForkBranch, JoinStrategy, LoopNode,
    MapItems, MapNode, Node, NodeKind, OnExhausted, OnTimeout, RetryPolicy, RetryStrategy,
    SwitchCase,
};
use crate::limits;

/// Every node field of every node type (snake_case), to tell "wrong type of node" apart from
/// a typo.
const ALL_NODE_FIELDS: &[&str] = &[
    "id",
    "type",
    "depends_on",
    "dependencies",
    "when",
    "agent_name",
    "workflow_name",
    "input",
    "instruction",
    "input_schema_override",
    "output_schema_override",
    "retry_strategy",
    "timeout",
    "condition",
    "true_branch",
    "false_branch",
    "cases",
    "default",
    "items",
    "with_param",
    "with_items",
    "node",
    "concurrency_limit",
    "max_items",
    "branches",
    "fail_fast",
    "wait_for",
    "strategy",
    "n",
    "max_iterations",
    "delay",
    "on_iterations_exhausted",
    "approvers",
    "message",
    "on_timeout",
    "on_failure",
    "error_policy",
    "signal",
    "correlation",
    "schema",
    "signers",
];

/// The node types, as written.
const NODE_TYPES: &[&str] = &[
    "agent",
    "workflow",
    "conditional",
    "switch",
    "map",
    "fork",
    "join",
    "loop",
    "approval",
    "wait",
];

/// What reading one node gave.
pub(crate) enum Parsed {
    /// A node (possibly with placeholders where problems were recorded).
    Node(Box<Node>),
    /// A node with a usable id but no usable type.
    Ghost(String),
    /// Nothing usable.
    Nothing,
}

/// Stands in for a condition that failed to compile (see [`placeholder_template`]).
fn placeholder_condition() -> Condition {
    Condition::compile("true").expect("'true' is a valid condition")
}

/// Reads node number `i` of `workflow.nodes`.
pub(crate) fn parse_node(i: usize, v: &Value, default_max_items: usize, sink: &mut Sink) -> Parsed {
    let Some(obj) = v.as_object() else {
        sink.push(
            None,
            &format!("nodes[{i}]"),
            format!("expected a mapping, found {}", type_name(v)),
        );
        return Parsed::Nothing;
    };
    // The id first: every other problem of the node is reported under it.
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let prefix = if id.is_some() {
        String::new()
    } else {
        format!("nodes[{i}].")
    };
    let mut f = Fields::new(obj, id.as_deref(), &prefix);
    match f.required(sink, "id", &[]) {
        Some(Value::String(s)) if s.is_empty() => f.problem(sink, "id", "must not be empty"),
        Some(Value::String(s)) if !is_token(s) => f.problem(
            sink,
            "id",
            format!("'{s}' is not a valid id: use only letters, digits, '_' and '-'"),
        ),
        Some(Value::String(s)) if is_reserved(s) => f.problem(
            sink,
            "id",
            format!("'{s}' is reserved for templates; choose another id"),
        ),
        Some(Value::String(_)) | None => {}
        Some(other) => f.wrong(sink, "id", "a string", other),
    }
    let type_name = f.req_string(sink, "type", &[]);
    let depends_on = f
        .strings(sink, "depends_on", &["dependencies"])
        .unwrap_or_default();
    let when = f.condition(sink, "when", &[]);
    let on_failure = super::policy::parse_node_policy(&mut f, sink);

    let kind = match type_name.as_deref() {
        Some("agent") => Some(NodeKind::Call(parse_call(&mut f, sink, Target::Agent))),
        Some("workflow") => Some(NodeKind::Call(parse_call(&mut f, sink, Target::Workflow))),
        Some("conditional") => Some(NodeKind::Conditional {
            condition: f
                .req_condition(sink, "condition", &[])
                .unwrap_or_else(placeholder_condition),
            true_branch: f.req_string(sink, "true_branch", &[]).unwrap_or_default(),
            false_branch: f.string(sink, "false_branch", &[]),
        }),
        Some("switch") => Some(parse_switch(&mut f, sink)),
        Some("map") => Some(NodeKind::Map(parse_map(&mut f, sink, default_max_items))),
        Some("fork") => Some(parse_fork(&mut f, sink)),
        Some("join") => Some(parse_join(&mut f, sink)),
        Some("loop") => Some(NodeKind::Loop(parse_loop(&mut f, sink))),
        Some("approval") => Some(NodeKind::Approval(parse_approval(&mut f, sink))),
        Some("wait") => Some(NodeKind::Wait(super::wait::parse_wait(&mut f, sink))),
        Some(other) => {
            f.problem(
                sink,
                "type",
                format!(
                    "unknown node type '{other}' (expected one of: {})",
                    NODE_TYPES.join(", ")
                ),
            );
            None
        }
        None => None,
    };
    match kind {
        Some(kind) => {
            let what = format!("{} nodes", kind.type_name());
            f.finish(sink, &what, ALL_NODE_FIELDS);
            match id {
                Some(id) => Parsed::Node(Box::new(Node {
                    id,
                    depends_on,
                    when,
                    on_failure,
                    kind,
                })),
                None => Parsed::Nothing,
            }
        }
        // Without a type the node's fields cannot be checked, and listing them as unknown
        // would only add noise.
        None => id.map_or(Parsed::Nothing, Parsed::Ghost),
    }
}

/// Names that templates use as roots, so no node may take them.
fn is_reserved(id: &str) -> bool {
    matches!(
        id,
        "workflow" | "_map_item" | "_map_index" | "_loop_iteration"
    )
}

/// Which name field a call takes.
#[derive(Clone, Copy)]
enum Target {
    Agent,
    Workflow,
    /// A fork branch: either.
    Either,
}

/// The call fields shared by agent and workflow nodes and fork branches.
fn parse_call(f: &mut Fields<'_>, sink: &mut Sink, target: Target) -> Call {
    let target = match target {
        Target::Agent => {
            CallTarget::Agent(f.req_string(sink, "agent_name", &[]).unwrap_or_default())
        }
        Target::Workflow => {
            CallTarget::Workflow(f.req_string(sink, "workflow_name", &[]).unwrap_or_default())
        }
        Target::Either => {
            let agent = f.string(sink, "agent_name", &[]);
            let workflow = f.string(sink, "workflow_name", &[]);
            match (agent, workflow) {
                (Some(a), None) => CallTarget::Agent(a),
                (None, Some(w)) => CallTarget::Workflow(w),
                (Some(a), Some(_)) => {
                    f.problem(
                        sink,
                        "agent_name",
                        "give either agent_name or workflow_name, not both",
                    );
                    CallTarget::Agent(a)
                }
                (None, None) => {
                    f.problem(sink, "agent_name", "missing field (or workflow_name)");
                    CallTarget::Agent(String::new())
                }
            }
        }
    };
    let input = f.template(sink, "input");
    let instruction = match f.get(sink, "instruction", &[]) {
        Some(v @ Value::String(_)) => f.compile_template(sink, "instruction", v),
        Some(v) => {
            f.wrong(sink, "instruction", "a string", v);
            None
        }
        None => None,
    };
    let input_schema_override = f.schema(sink, "input_schema_override");
    let output_schema_override = f.schema(sink, "output_schema_override");
    let retry_strategy = match f.get(sink, "retry_strategy", &[]) {
        Some(v) => parse_retry(v, f.node(), &f.field("retry_strategy"), sink),
        None => None,
    };
    let timeout = f.duration(sink, "timeout", true);
    Call {
        target,
        input,
        instruction,
        input_schema_override,
        output_schema_override,
        retry_strategy,
        timeout,
    }
}

/// `retry_strategy` at `field` (of `node`, or of the workflow).
pub(crate) fn parse_retry(
    v: &Value,
    node: Option<&str>,
    field: &str,
    sink: &mut Sink,
) -> Option<RetryStrategy> {
    let Some(obj) = v.as_object() else {
        sink.push(
            node,
            field,
            format!("expected a mapping, found {}", type_name(v)),
        );
        return None;
    };
    let mut f = Fields::new(obj, node, &format!("{field}."));
    let limit = f
        .int(sink, "limit", 0)
        .map_or(3, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let policy = match f.string(sink, "retry_policy", &[]).as_deref() {
        None => RetryPolicy::Always,
        Some("Always" | "always") => RetryPolicy::Always,
        Some("OnFailure" | "on_failure" | "onFailure") => RetryPolicy::OnFailure,
        Some("OnError" | "on_error" | "onError") => RetryPolicy::OnError,
        Some(other) => {
            f.problem(
                sink,
                "retry_policy",
                format!("unknown retry policy '{other}' (expected Always, OnFailure or OnError)"),
            );
            RetryPolicy::Always
        }
    };
    let mut backoff = Backoff::default();
    if let Some(b) = f.get(sink, "backoff", &[]) {
        match b.as_object() {
            Some(bobj) => {
                let mut bf = Fields::new(bobj, node, &format!("{field}.backoff."));
                if let Some(d) = bf.duration(sink, "duration", false) {
                    backoff.duration = d;
                }
                match bf.get(sink, "factor", &[]) {
                    None => {}
                    Some(v) => match v.as_f64() {
                        Some(x) if x.is_finite() && x > 0.0 => backoff.factor = x,
                        _ => bf.problem(
                            sink,
                            "factor",
                            format!("must be a positive number, found {v}"),
                        ),
                    },
                }
                backoff.max_duration = bf.duration(sink, "max_duration", false);
                bf.finish(sink, "backoff", &[]);
            }
            None => f.wrong(sink, "backoff", "a mapping", b),
        }
    }
    let non_retryable_errors = f
        .strings(sink, "non_retryable_errors", &[])
        .unwrap_or_default();
    f.finish(sink, "retry_strategy", &[]);
    Some(RetryStrategy {
        limit,
        policy,
        backoff,
        non_retryable_errors,
    })
}

fn parse_switch(f: &mut Fields<'_>, sink: &mut Sink) -> NodeKind {
    let mut cases = Vec::new();
    match f.required(sink, "cases", &[]) {
        Some(Value::Array(items)) if items.is_empty() => {
            f.problem(sink, "cases", "a switch needs at least one case")
        }
        Some(Value::Array(items)) => {
            for (k, item) in items.iter().enumerate() {
                let name = format!("cases[{k}]");
                let Some(obj) = item.as_object() else {
                    f.wrong(sink, &name, "a mapping with 'when' and 'then'", item);
                    continue;
                };
                let mut cf = Fields::new(obj, f.node(), &f.field(&format!("{name}.")));
                let condition = cf
                    .req_condition(sink, "when", &["condition"])
                    .unwrap_or_else(placeholder_condition);
                let target = cf.req_string(sink, "then", &["node"]).unwrap_or_default();
                cf.finish(sink, "switch cases", &[]);
                cases.push(SwitchCase { condition, target });
            }
        }
        Some(v) => f.wrong(sink, "cases", "a list of cases", v),
        None => {}
    }
    NodeKind::Switch {
        cases,
        default: f.string(sink, "default", &[]),
    }
}

fn parse_map(f: &mut Fields<'_>, sink: &mut Sink, default_max_items: usize) -> MapNode {
    let items = f.get(sink, "items", &[]);
    let with_param = f.get(sink, "with_param", &[]);
    let with_items = f.get(sink, "with_items", &[]);
    let given = [items.is_some(), with_param.is_some(), with_items.is_some()]
        .iter()
        .filter(|b| **b)
        .count();
    if given != 1 {
        f.problem(
            sink,
            "items",
            if given == 0 {
                "missing field: give exactly one of items, withParam or withItems"
            } else {
                "give exactly one of items, withParam or withItems"
            },
        );
    }
    let source = if let Some(v) = items {
        match v {
            Value::String(_) => f.compile_template(sink, "items", v).map(MapItems::Template),
            Value::Object(o)
                if o.len() == 1 && (o.contains_key("coalesce") || o.contains_key("concat")) =>
            {
                f.compile_template(sink, "items", v).map(MapItems::Template)
            }
            Value::Array(_) => {
                f.problem(
                    sink,
                    "items",
                    "a literal list is not allowed here; use withItems for a literal list",
                );
                None
            }
            other => {
                f.wrong(
                    sink,
                    "items",
                    "a template string or a coalesce/concat operator",
                    other,
                );
                None
            }
        }
    } else if let Some(v) = with_param {
        match v {
            Value::String(_) => f
                .compile_template(sink, "with_param", v)
                .map(MapItems::Template),
            other => {
                f.wrong(sink, "with_param", "a template string", other);
                None
            }
        }
    } else if let Some(v) = with_items {
        match v {
            Value::Array(list) => Some(MapItems::Literal(list.clone())),
            other => {
                f.wrong(sink, "with_items", "a list", other);
                None
            }
        }
    } else {
        None
    };
    MapNode {
        items: source.unwrap_or_else(|| MapItems::Literal(Vec::new())),
        node: f.req_string(sink, "node", &[]).unwrap_or_default(),
        concurrency_limit: f
            .int(sink, "concurrency_limit", 1)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        max_items: f
            .int_at_most(sink, "max_items", 1, map_items_limit())
            .map_or(default_max_items, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
    }
}

fn parse_fork(f: &mut Fields<'_>, sink: &mut Sink) -> NodeKind {
    let mut branches: Vec<ForkBranch> = Vec::new();
    match f.required(sink, "branches", &[]) {
        Some(Value::Array(items)) if items.is_empty() => {
            f.problem(sink, "branches", "a fork needs at least one branch")
        }
        Some(Value::Array(items)) => {
            for (k, item) in items.iter().enumerate() {
                let name = format!("branches[{k}]");
                let Some(obj) = item.as_object() else {
                    f.wrong(sink, &name, "a mapping", item);
                    continue;
                };
                let mut bf = Fields::new(obj, f.node(), &f.field(&format!("{name}.")));
                let id = bf.req_string(sink, "id", &[]).unwrap_or_default();
                if !id.is_empty() && !is_token(&id) {
                    bf.problem(
                        sink,
                        "id",
                        format!("'{id}' is not a valid id: use only letters, digits, '_' and '-'"),
                    );
                }
                let call = parse_call(&mut bf, sink, Target::Either);
                let output_key = bf
                    .string(sink, "output_key", &[])
                    .unwrap_or_else(|| id.clone());
                if !id.is_empty() && branches.iter().any(|b| b.id == id) {
                    bf.problem(sink, "id", format!("duplicate branch id '{id}'"));
                }
                if !output_key.is_empty() && branches.iter().any(|b| b.output_key == output_key) {
                    bf.problem(
                        sink,
                        "output_key",
                        format!("duplicate output key '{output_key}'"),
                    );
                }
                bf.finish(sink, "fork branches", &[]);
                branches.push(ForkBranch {
                    id,
                    output_key,
                    call,
                });
            }
        }
        Some(v) => f.wrong(sink, "branches", "a list of branches", v),
        None => {}
    }
    NodeKind::Fork {
        branches,
        fail_fast: f.bool(sink, "fail_fast").unwrap_or(true),
    }
}

fn parse_join(f: &mut Fields<'_>, sink: &mut Sink) -> NodeKind {
    let wait_for = match f.required(sink, "wait_for", &[]) {
        Some(_) => f.strings(sink, "wait_for", &[]).unwrap_or_default(),
        None => Vec::new(),
    };
    if f.get(sink, "wait_for", &[])
        .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
    {
        f.problem(
            sink,
            "wait_for",
            "a join needs at least one node to wait for",
        );
    }
    let strategy = f.string(sink, "strategy", &[]);
    let n = f.int(sink, "n", 0);
    let strategy = match strategy.as_deref() {
        None | Some("all") => JoinStrategy::All,
        Some("any") => JoinStrategy::Any,
        Some("n_of_m") => match n {
            Some(n) if n >= 1 && (n as usize) <= wait_for.len() => JoinStrategy::NOfM(n as usize),
            Some(n) => {
                f.problem(
                    sink,
                    "n",
                    format!(
                        "must be between 1 and the {} nodes of wait_for, found {n}",
                        wait_for.len()
                    ),
                );
                JoinStrategy::All
            }
            None => {
                f.problem(sink, "n", "missing field (strategy n_of_m needs n)");
                JoinStrategy::All
            }
        },
        Some(other) => {
            f.problem(
                sink,
                "strategy",
                format!("unknown join strategy '{other}' (expected all, any or n_of_m)"),
            );
            JoinStrategy::All
        }
    };
    if n.is_some() && !matches!(strategy, JoinStrategy::NOfM(_)) && strategy_is_not_n_of_m(f, sink)
    {
        f.problem(sink, "n", "n is only used with strategy n_of_m");
    }
    NodeKind::Join { wait_for, strategy }
}

/// Whether the join's `strategy` is written as something else than `n_of_m` (an invalid
/// `n` with `n_of_m` was already reported).
fn strategy_is_not_n_of_m(f: &mut Fields<'_>, sink: &mut Sink) -> bool {
    f.get(sink, "strategy", &[]).and_then(Value::as_str) != Some("n_of_m")
}

fn parse_loop(f: &mut Fields<'_>, sink: &mut Sink) -> LoopNode {
    LoopNode {
        node: f.req_string(sink, "node", &[]).unwrap_or_default(),
        condition: f
            .req_condition(sink, "condition", &[])
            .unwrap_or_else(placeholder_condition),
        max_iterations: f
            .int_at_most(
                sink,
                "max_iterations",
                1,
                (
                    "max_loop_iterations",
                    u64::from(limits::MAX_LOOP_ITERATIONS),
                ),
            )
            .map_or(100, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        delay: f.duration(sink, "delay", false),
        on_exhausted: match f.string(sink, "on_iterations_exhausted", &[]).as_deref() {
            None | Some("succeed") => OnExhausted::Succeed,
            Some("fail") => OnExhausted::Fail,
            Some(other) => {
                f.problem(
                    sink,
                    "on_iterations_exhausted",
                    format!("expected succeed or fail, found '{other}'"),
                );
                OnExhausted::Succeed
            }
        },
    }
}

fn parse_approval(f: &mut Fields<'_>, sink: &mut Sink) -> ApprovalNode {
    let approvers = f.strings(sink, "approvers", &[]).unwrap_or_default();
    for (i, entry) in approvers.iter().enumerate() {
        if let Err(why) = Approver::parse(entry) {
            f.problem(sink, &format!("approvers[{i}]"), why);
        }
    }
    let message = match f.get(sink, "message", &[]) {
        Some(v @ Value::String(_)) => f.compile_template(sink, "message", v),
        Some(v) => {
            f.wrong(sink, "message", "a string", v);
            None
        }
        None => None,
    };
    let timeout = f.duration(sink, "timeout", true);
    let on_timeout = match f.string(sink, "on_timeout", &[]).as_deref() {
        None | Some("reject") => OnTimeout::Reject,
        Some("approve") => OnTimeout::Approve,
        Some(other) => {
            f.problem(
                sink,
                "on_timeout",
                format!("expected reject or approve, found '{other}'"),
            );
            OnTimeout::Reject
        }
    };
    ApprovalNode {
        approvers,
        message,
        timeout,
        on_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvers_are_user_keys_or_names() {
        let user = agent_sdk::Signer::generate();
        let key = user.public_key();
        assert_eq!(Approver::parse(key), Ok(Approver::Key(key)));
        assert_eq!(Approver::parse("ops-team"), Ok(Approver::Name("ops-team")));
        assert_eq!(Approver::parse("a.b@c_d"), Ok(Approver::Name("a.b@c_d")));
        let seed = Approver::parse(&user.seed()).unwrap_err();
        assert!(seed.contains("seed, a secret"), "{seed}");
        let mut broken = key.to_string();
        broken.replace_range(10..11, if &key[10..11] == "A" { "B" } else { "A" });
        let e = Approver::parse(&broken).unwrap_err();
        assert!(e.contains("not a valid NKey user public key"), "{e}");
        for bad in ["", "two words", "-dash", "a/b"] {
            let e = Approver::parse(bad).unwrap_err();
            assert!(e.contains("neither an NKey user public key"), "{bad}: {e}");
        }
        let yaml = "name: W\nworkflow:\n  description: d\n  nodes:\n    - {id: g, type: approval, approvers: [ok, 'no way']}\n";
        let problems = super::super::parse_str(yaml, "t.yaml").unwrap_err();
        let text = format!("{problems:?}");
        assert!(
            text.contains("approvers[1]") && text.contains("no way"),
            "{text}"
        );
    }

    #[test]
    fn placeholders_compile() {
        let _ = placeholder_condition();
        let _ = super::super::parse::placeholder_template();
    }
}
