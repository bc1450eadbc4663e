//! From a JSON value (the parsed file) to a [`Workflow`] without its graph: the file's
//! settings and the `workflow` block. Nodes are read in [`super::nodes`]. Every problem is
//! recorded in the [`Sink`] and reading goes on, so that one load reports all of them.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;
use workflow_expr::Template;

use super::fields::{type_name, Fields};
use super::nodes::{parse_node, parse_retry, Parsed};
use super::problem::Sink;
use super::{ExitHandlers, Graph, Node, Workflow};
use crate::limits;

/// Defaults of the file's settings (the reference system's).
const DEFAULT_MAX_EXECUTION_SECS: f64 = 1800.0;
const DEFAULT_NODE_TIMEOUT_SECS: f64 = 300.0;
const DEFAULT_MAX_MAP_ITEMS: usize = 100;

/// `max_map_items`, for [`Fields::int_at_most`].
pub(crate) fn map_items_limit() -> (&'static str, u64) {
    ("max_map_items", limits::MAX_MAP_ITEMS as u64)
}

/// A parsed file: the workflow (graph not yet filled) and the ids of nodes that had an id but
/// could not be read at all (unknown type), so that references to them are not reported as
/// missing a second time.
pub(crate) struct Draft {
    pub(crate) workflow: Workflow,
    pub(crate) ghosts: HashSet<String>,
}

/// Whether `s` is a single NATS subject token we accept as a name or id.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Reads the whole file.
pub(crate) fn parse_document(root: &Value, sink: &mut Sink) -> Option<Draft> {
    let Some(obj) = root.as_object() else {
        sink.push(
            None,
            "",
            format!(
                "expected a mapping with 'name' and 'workflow' at the top level, found {}",
                type_name(root)
            ),
        );
        return None;
    };
    let mut f = Fields::new(obj, None, "");
    let top = parse_top_level(&mut f, sink);
    let block = f.required(sink, "workflow", &[]);
    f.finish(sink, "the top level", &[]);
    parse_block(block?, top, sink)
}

/// The settings beside the `workflow` block.
struct TopLevel {
    name: Option<String>,
    display_name: Option<String>,
    max_execution_time: Duration,
    default_node_timeout: Duration,
    default_max_map_items: usize,
}

fn parse_top_level(f: &mut Fields<'_>, sink: &mut Sink) -> TopLevel {
    let name = f.req_string(sink, "name", &[]);
    if let Some(n) = &name {
        if !is_token(n) {
            f.problem(
                sink,
                "name",
                format!("'{n}' is not a valid agent name: use only letters, digits, '_' and '-' (it is a NATS subject token)"),
            );
        }
    }
    let display_name = f.string(sink, "display_name", &[]);
    let max_execution_time = seconds(
        f,
        sink,
        "max_workflow_execution_time_seconds",
        DEFAULT_MAX_EXECUTION_SECS,
    );
    let default_node_timeout = seconds(
        f,
        sink,
        "default_node_timeout_seconds",
        DEFAULT_NODE_TIMEOUT_SECS,
    );
    let default_max_map_items = f
        .int_at_most(sink, "default_max_map_items", 1, map_items_limit())
        .map_or(DEFAULT_MAX_MAP_ITEMS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    TopLevel {
        name,
        display_name,
        max_execution_time,
        default_node_timeout,
        default_max_map_items,
    }
}

/// The `workflow` block, with the top-level settings already read.
fn parse_block(block: &Value, top: TopLevel, sink: &mut Sink) -> Option<Draft> {
    let Some(wobj) = block.as_object() else {
        sink.push(
            None,
            "workflow",
            format!("expected a mapping, found {}", type_name(block)),
        );
        return None;
    };
    let mut w = Fields::new(wobj, None, "");
    let description = w.req_string(sink, "description", &[]).unwrap_or_default();
    let version = parse_version(&mut w, sink);
    let input_schema = w.schema(sink, "input_schema");
    let output_schema = w.schema(sink, "output_schema");
    let (nodes, ghosts) = parse_nodes(&mut w, sink, top.default_max_map_items);
    let output_mapping = match w.required(sink, "output_mapping", &[]) {
        Some(v) => w.compile_template(sink, "output_mapping", v),
        None => None,
    };
    let skills = parse_skills(&mut w, sink);
    let on_exit = parse_on_exit(&mut w, sink);
    let fail_fast = w.bool(sink, "fail_fast").unwrap_or(true);
    let on_failure = super::policy::parse_workflow_policy(&mut w, sink).unwrap_or_default();
    let call_depth_limit = (
        "the ceiling of max_call_depth",
        u64::from(limits::MAX_CALL_DEPTH),
    );
    let max_call_depth = w
        .int_at_most(sink, "max_call_depth", 1, call_depth_limit)
        .map_or(limits::DEFAULT_MAX_CALL_DEPTH, |n| {
            u32::try_from(n).unwrap_or(u32::MAX)
        });
    let retry_strategy = match w.get(sink, "retry_strategy", &[]) {
        Some(v) => parse_retry(v, None, "retry_strategy", sink),
        None => None,
    };
    let concurrency = w
        .int(sink, "concurrency", 1)
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let pause = super::pause::parse_pause(&mut w, sink);
    let schedules = super::schedules::parse_schedules(&mut w, sink);
    let triggers = super::triggers::parse_triggers(&mut w, sink);
    let flow = super::flow::parse_flow(&mut w, sink);
    let agent_limits = super::agent_limits::parse_agent_limits(&mut w, sink);
    w.finish(sink, "the workflow block", &[]);

    let workflow = Workflow {
        name: top.name.unwrap_or_default(),
        display_name: top.display_name,
        max_execution_time: top.max_execution_time,
        default_node_timeout: top.default_node_timeout,
        default_max_map_items: top.default_max_map_items,
        description,
        version,
        input_schema,
        output_schema,
        nodes,
        output_mapping: output_mapping.unwrap_or_else(placeholder_template),
        skills,
        on_exit,
        fail_fast,
        on_failure,
        max_call_depth,
        retry_strategy,
        concurrency,
        pause,
        schedules,
        triggers,
        flow,
        agent_limits,
        source: block.clone(),
        document: Value::Null,
        hash: String::new(),
        graph: Graph::default(),
    };
    super::wait::check_routes(&workflow, sink);
    Some(Draft { workflow, ghosts })
}

/// `version`: a string or a number (written as is), "1.0.0" when absent.
fn parse_version(w: &mut Fields<'_>, sink: &mut Sink) -> String {
    match w.get(sink, "version", &[]) {
        None => "1.0.0".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(v) => {
            w.wrong(sink, "version", "a string", v);
            String::new()
        }
    }
}

/// `nodes`: a non-empty list. Returns the nodes read and the ids of the ghosts (see
/// [`Draft`]).
fn parse_nodes(
    w: &mut Fields<'_>,
    sink: &mut Sink,
    default_max_map_items: usize,
) -> (Vec<Node>, HashSet<String>) {
    let mut nodes: Vec<Node> = Vec::new();
    let mut ghosts = HashSet::new();
    match w.required(sink, "nodes", &[]) {
        Some(Value::Array(items)) if items.is_empty() => {
            w.problem(sink, "nodes", "a workflow needs at least one node");
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match parse_node(i, item, default_max_map_items, sink) {
                    Parsed::Node(n) => nodes.push(*n),
                    Parsed::Ghost(id) => {
                        ghosts.insert(id);
                    }
                    Parsed::Nothing => {}
                }
            }
        }
        Some(v) => w.wrong(sink, "nodes", "a list of nodes", v),
        None => {}
    }
    (nodes, ghosts)
}

/// Stands in for a template that failed to compile; never leaves the loader, because a
/// failed compile is a problem and problems make the load fail.
pub(crate) fn placeholder_template() -> Template {
    Template::compile(&Value::Null).expect("null is a template without paths")
}

/// A positive number of seconds, with a default.
fn seconds(f: &mut Fields<'_>, sink: &mut Sink, name: &str, default: f64) -> Duration {
    let secs = match f.get(sink, name, &[]) {
        None => default,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s < 1e12 => s,
            Some(_) => {
                f.problem(
                    sink,
                    name,
                    format!("must be a positive number of seconds, found {v}"),
                );
                default
            }
            None => {
                f.wrong(sink, name, "a number of seconds", v);
                default
            }
        },
    };
    Duration::from_secs_f64(secs)
}

/// `skills`: a list of mappings with at least a string `id` and `name` (advertised on the
/// agent card as written).
fn parse_skills(w: &mut Fields<'_>, sink: &mut Sink) -> Vec<Value> {
    let Some(v) = w.get(sink, "skills", &[]) else {
        return Vec::new();
    };
    let Some(items) = v.as_array() else {
        w.wrong(sink, "skills", "a list of skills", v);
        return Vec::new();
    };
    for (i, skill) in items.iter().enumerate() {
        let Some(obj) = skill.as_object() else {
            w.wrong(
                sink,
                &format!("skills[{i}]"),
                "a mapping with 'id' and 'name'",
                skill,
            );
            continue;
        };
        for key in ["id", "name"] {
            match obj.get(key) {
                Some(Value::String(_)) => {}
                Some(other) => w.wrong(sink, &format!("skills[{i}].{key}"), "a string", other),
                None => w.problem(sink, &format!("skills[{i}].{key}"), "missing field"),
            }
        }
    }
    items.clone()
}

/// `on_exit`: a node id, or a mapping with `always`, `on_success`, `on_failure`, `on_cancel`.
fn parse_on_exit(w: &mut Fields<'_>, sink: &mut Sink) -> ExitHandlers {
    let mut handlers = ExitHandlers::default();
    match w.get(sink, "on_exit", &[]) {
        None => {}
        Some(Value::String(s)) => handlers.always = Some(s.clone()),
        Some(Value::Object(obj)) => {
            let mut f = Fields::new(obj, None, "on_exit.");
            handlers.always = f.string(sink, "always", &[]);
            handlers.on_success = f.string(sink, "on_success", &[]);
            handlers.on_failure = f.string(sink, "on_failure", &[]);
            handlers.on_cancel = f.string(sink, "on_cancel", &[]);
            f.finish(sink, "on_exit", &[]);
        }
        Some(v) => w.wrong(
            sink,
            "on_exit",
            "a node id or a mapping of outcomes to node ids",
            v,
        ),
    }
    handlers
}
