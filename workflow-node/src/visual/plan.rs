//! The dry-run plan of a workflow: parallel batches of the main DAG, then branches, map and
//! loop bodies, approval gates, exit handlers, and each call's retries and timeout.
//!
//! [`plan`] computes a [`Plan`] (plain data, usable by tests and tools); its `Display` is
//! the human-readable text `workflow-node plan` prints.

use std::fmt;
use std::time::Duration;

use crate::definition::{
    ApprovalNode, CallTarget, ForkBranch, JoinStrategy, LoopNode, MapItems, MapNode, NodeKind,
    NodeRole, OnExhausted, OnTimeout, RetryPolicy, Schedule, SwitchCase, Trigger, WaitNode, When,
    Workflow,
};

/// What a workflow will do, section by section.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The workflow's name: the agent name it is called by.
    pub name: String,
    /// The file's `display_name`, shown in parentheses after the name; `None` when absent.
    pub display_name: Option<String>,
    /// `workflow.version` ("1.0.0" when the file gives none), printed as `v{version}`.
    pub version: String,
    /// Run-wide settings, one `key value` string each.
    pub settings: Vec<String>,
    /// Batch k: the main-DAG nodes whose longest dependency chain has length k. Nodes of one
    /// batch can run in parallel. Each entry is `(node id, short description)`.
    pub batches: Vec<Vec<(String, String)>>,
    /// Conditionals, switches, forks and joins: `(node id, description)`.
    pub branches: Vec<(String, String)>,
    /// Maps and loops with their inner node and limits: `(node id, description)`.
    pub repeats: Vec<(String, String)>,
    /// Approval gates: `(node id, description)`.
    pub gates: Vec<(String, String)>,
    /// Waits for signals: `(node id, description)`.
    pub waits: Vec<(String, String)>,
    /// Exit handlers: `(trigger, node id)`, trigger one of always, on_success, on_failure,
    /// on_cancel.
    pub exit_handlers: Vec<(String, String)>,
    /// Every call (agent and workflow nodes, fork branches): `(node id, attempts, retry and
    /// timeout)`.
    pub calls: Vec<(String, String)>,
    /// Schedules: `(name, when, overlap, catch-up window, jitter, paused)` in words.
    pub schedules: Vec<(String, String)>,
    /// Event triggers: `(name, what it reads, condition, key)` in words.
    pub triggers: Vec<(String, String)>,
    /// Limits on agents' calls: `(agent, its limits)` in words.
    pub agent_limits: Vec<(String, String)>,
}

/// The plan of `wf`.
pub fn plan(wf: &Workflow) -> Plan {
    let mut plan = Plan {
        name: wf.name.clone(),
        display_name: wf.display_name.clone(),
        version: wf.version.clone(),
        settings: settings(wf),
        batches: batches(wf),
        branches: Vec::new(),
        repeats: Vec::new(),
        gates: Vec::new(),
        waits: Vec::new(),
        exit_handlers: exit_handlers(wf),
        calls: Vec::new(),
        schedules: wf.schedules.iter().map(schedule_text).collect(),
        triggers: wf.triggers.iter().map(trigger_text).collect(),
        agent_limits: wf
            .agent_limits
            .iter()
            .map(|(agent, l)| (agent.clone(), l.describe()))
            .collect(),
    };
    for node in &wf.nodes {
        let id = node.id.clone();
        match &node.kind {
            NodeKind::Call(call) => plan.calls.push((id, call_text(wf, call))),
            NodeKind::Conditional {
                condition,
                true_branch,
                false_branch,
            } => plan.branches.push((
                id,
                format!(
                    "conditional: if {} then {true_branch} else {}",
                    condition.source(),
                    false_branch.as_deref().unwrap_or("(nothing)")
                ),
            )),
            NodeKind::Switch { cases, default } => plan
                .branches
                .push((id, switch_text(cases, default.as_deref()))),
            NodeKind::Fork {
                branches,
                fail_fast,
            } => {
                plan.branches
                    .push((id.clone(), fork_text(branches, *fail_fast)));
                for b in branches {
                    plan.calls
                        .push((format!("{id}.{}", b.id), call_text(wf, &b.call)));
                }
            }
            NodeKind::Join { wait_for, strategy } => {
                plan.branches.push((id, join_text(wait_for, *strategy)))
            }
            NodeKind::Map(m) => plan.repeats.push((id, map_text(m))),
            NodeKind::Loop(l) => plan.repeats.push((id, loop_text(l))),
            NodeKind::Approval(a) => plan.gates.push((id, approval_text(a))),
            NodeKind::Wait(w) => plan.waits.push((id, wait_text(w))),
        }
    }
    plan
}

/// A schedule in words: `cron '0 8 * * *' in Europe/Paris; overlap skip; catch-up 1m`.
fn schedule_text(s: &Schedule) -> (String, String) {
    let mut words = vec![match &s.when {
        When::Cron { zone, .. } => {
            let cron = s.source.get("cron").and_then(|c| c.as_str()).unwrap_or("?");
            format!("cron '{cron}' in {zone}")
        }
        When::Every(every) => format!("every {}", duration(*every)),
    }];
    words.push(format!("overlap {}", s.overlap.as_str()));
    words.push(format!("catch-up {}", duration(s.catchup_window)));
    if !s.jitter.is_zero() {
        words.push(format!("jitter {}", duration(s.jitter)));
    }
    if s.input.is_some() {
        words.push("input from a template".into());
    }
    if s.paused {
        words.push("paused".into());
    }
    (s.name.clone(), words.join("; "))
}

/// A trigger in words: `stream ORDERS, subject orders.created; if …; one run per …`.
fn trigger_text(t: &Trigger) -> (String, String) {
    if let Some(hook) = &t.webhook {
        let mut words = vec![format!(
            "webhook POST /hooks/{} ({} signature, secret from {})",
            t.name,
            hook.scheme.name(),
            hook.secret
        )];
        if let Some(c) = &t.condition {
            words.push(format!("if {}", c.source()));
        }
        words.push(match &t.dedup_key {
            Some(k) => format!("one run per {}", workflow_expr::to_text(k.source())),
            None => "one run per body".into(),
        });
        return (t.name.clone(), words.join("; "));
    }
    let mut words = vec![match (&t.stream, &t.subject) {
        (Some(stream), Some(subject)) => format!("stream {stream}, subject {subject}"),
        (Some(stream), None) => format!("stream {stream}"),
        (None, subject) => format!("subject {}", subject.as_deref().unwrap_or("?")),
    }];
    if let Some(c) = &t.condition {
        words.push(format!("if {}", c.source()));
    }
    words.push(match &t.dedup_key {
        Some(k) => format!("one run per {}", workflow_expr::to_text(k.source())),
        None => "one run per message".into(),
    });
    if let Some(route) = &t.signal {
        let key = workflow_expr::to_text(route.key.source());
        words.push(format!(
            "signal '{}' to the run waiting under {key}",
            route.name
        ));
    }
    words.push(format!("parked after {} deliveries", t.max_deliveries));
    (t.name.clone(), words.join("; "))
}

/// The main nodes by batch: batch k holds the nodes whose longest dependency chain has
/// length k.
fn batches(wf: &Workflow) -> Vec<Vec<(String, String)>> {
    let role = |i: usize| wf.graph.roles.get(i).copied().unwrap_or(NodeRole::Main);
    // In topological order, so every dependency's level is known first.
    let mut level = vec![0usize; wf.nodes.len()];
    for &i in &wf.graph.topo_order {
        level[i] = wf.nodes[i]
            .depends_on
            .iter()
            .filter_map(|d| wf.graph.index.get(d))
            .filter(|&&j| role(j) == NodeRole::Main)
            .map(|&j| level[j] + 1)
            .max()
            .unwrap_or(0);
    }
    let mut batches: Vec<Vec<(String, String)>> = Vec::new();
    for (i, node) in wf.nodes.iter().enumerate() {
        if role(i) != NodeRole::Main {
            continue;
        }
        let k = level[i];
        if batches.len() <= k {
            batches.resize(k + 1, Vec::new());
        }
        let mut what = short(&node.kind);
        if let Some(when) = &node.when {
            what.push_str(&format!(", when {}", when.source()));
        }
        batches[k].push((node.id.clone(), what));
    }
    batches
}

fn switch_text(cases: &[SwitchCase], default: Option<&str>) -> String {
    let mut parts: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| format!("case {}: {} -> {}", i + 1, c.condition.source(), c.target))
        .collect();
    parts.push(format!(
        "default -> {}",
        default.unwrap_or("(nothing; all targets skipped)")
    ));
    format!("switch (first match): {}", parts.join("; "))
}

fn fork_text(branches: &[ForkBranch], fail_fast: bool) -> String {
    let parts: Vec<String> = branches
        .iter()
        .map(|b| {
            format!(
                "{} [{}] -> output.{}",
                b.id,
                target_text(&b.call.target),
                b.output_key
            )
        })
        .collect();
    format!(
        "fork ({}): {}",
        if fail_fast {
            "fail fast"
        } else {
            "all branches run to the end"
        },
        parts.join("; ")
    )
}

fn join_text(wait_for: &[String], strategy: JoinStrategy) -> String {
    let how = match strategy {
        JoinStrategy::All => "all of".to_owned(),
        JoinStrategy::Any => "any of".to_owned(),
        JoinStrategy::NOfM(n) => format!("{n} of"),
    };
    format!("join: waits for {how} {}", wait_for.join(", "))
}

fn map_text(m: &MapNode) -> String {
    let items = match &m.items {
        MapItems::Template(t) => compact(t.source()),
        MapItems::Literal(v) => format!("{} literal items", v.len()),
    };
    let concurrency = m
        .concurrency_limit
        .map_or("unlimited".to_owned(), |n| n.to_string());
    format!(
        "map: runs {} once per item of {items}; max_items {}, concurrency {concurrency}",
        m.node, m.max_items
    )
}

fn loop_text(l: &LoopNode) -> String {
    let delay = l.delay.map_or("none".to_owned(), duration);
    let exhausted = match l.on_exhausted {
        OnExhausted::Succeed => "succeed",
        OnExhausted::Fail => "fail",
    };
    format!(
        "loop: runs {} then repeats while {}; max_iterations {}, delay {delay}, at the limit: {exhausted}",
        l.node,
        l.condition.source(),
        l.max_iterations
    )
}

fn approval_text(a: &ApprovalNode) -> String {
    let approvers = if a.approvers.is_empty() {
        "anyone".to_owned()
    } else {
        a.approvers.join(", ")
    };
    let timeout = a
        .timeout
        .map_or("none (the run's deadline)".to_owned(), duration);
    let on_timeout = match a.on_timeout {
        OnTimeout::Reject => "reject",
        OnTimeout::Approve => "approve",
    };
    let mut text = format!("approval by {approvers}; timeout {timeout}, on timeout {on_timeout}");
    if let Some(m) = &a.message {
        text.push_str(&format!("; message {}", compact(m.source())));
    }
    text
}

/// A wait in words: `signal 'paid' by key {{input.order}}; schema; signers alice; timeout 1h`.
fn wait_text(w: &WaitNode) -> String {
    let mut words = vec![format!("signal '{}'", w.signal)];
    words.push(match &w.correlation {
        Some(t) => format!("found by key {}", compact(t.source())),
        None => "found by the run".to_owned(),
    });
    if let Some(s) = &w.schema {
        words.push(format!("payload schema {}", compact(&s.source)));
    }
    words.push(if w.signers.is_empty() {
        "sent by whoever may steer the run".to_owned()
    } else {
        format!("sent by {}", w.signers.join(", "))
    });
    words.push(format!(
        "timeout {}",
        w.timeout
            .map_or("none (the run's deadline)".to_owned(), duration)
    ));
    words.join("; ")
}

fn exit_handlers(wf: &Workflow) -> Vec<(String, String)> {
    let handlers = [
        ("always", &wf.on_exit.always),
        ("on_success", &wf.on_exit.on_success),
        ("on_failure", &wf.on_exit.on_failure),
        ("on_cancel", &wf.on_exit.on_cancel),
    ];
    handlers
        .into_iter()
        .filter_map(|(trigger, handler)| Some((trigger.to_owned(), handler.clone()?)))
        .collect()
}

fn settings(wf: &Workflow) -> Vec<String> {
    let mut lines = vec![
        format!("deadline {}", duration(wf.max_execution_time)),
        format!("default node timeout {}", duration(wf.default_node_timeout)),
        format!("fail_fast {}", wf.fail_fast),
        format!(
            "concurrency {}",
            wf.concurrency
                .map_or("unlimited".to_owned(), |n| n.to_string())
        ),
        format!("max_call_depth {}", wf.max_call_depth),
    ];
    lines.extend(wf.flow.describe());
    lines
}

/// One line about a node for the batch list.
fn short(kind: &NodeKind) -> String {
    match kind {
        NodeKind::Call(c) => target_text(&c.target),
        other => other.type_name().to_owned(),
    }
}

fn target_text(target: &CallTarget) -> String {
    match target {
        CallTarget::Agent(a) => format!("agent {a}"),
        CallTarget::Workflow(w) => format!("workflow {w}"),
    }
}

/// `agent X: 4 attempts (...), timeout 5m`.
fn call_text(wf: &Workflow, call: &crate::definition::Call) -> String {
    let retry = match wf.retry_strategy_for(call) {
        None => "1 attempt (no retry)".to_owned(),
        Some(r) => {
            let policy = match r.policy {
                RetryPolicy::Always => "Always",
                RetryPolicy::OnFailure => "OnFailure",
                RetryPolicy::OnError => "OnError",
            };
            let mut backoff = format!(
                "backoff {} x{}",
                duration(r.backoff.duration),
                r.backoff.factor
            );
            if let Some(max) = r.backoff.max_duration {
                backoff.push_str(&format!(" max {}", duration(max)));
            }
            let mut text = format!("{} attempts ({policy}, {backoff}", r.limit as u64 + 1);
            if !r.non_retryable_errors.is_empty() {
                text.push_str(&format!(
                    ", non-retryable: {}",
                    r.non_retryable_errors.join(", ")
                ));
            }
            text.push(')');
            text
        }
    };
    let timeout = duration(call.timeout.unwrap_or(wf.default_node_timeout));
    format!("{}: {retry}, timeout {timeout}", target_text(&call.target))
}

/// A JSON value on one line.
fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `90s` → `1m30s`, `250ms`, `2h`; whole units where possible.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Workflow {}", self.name)?;
        if let Some(d) = &self.display_name {
            write!(f, " ({d})")?;
        }
        writeln!(f, " v{}", self.version)?;
        writeln!(f, "  {}", self.settings.join(", "))?;

        writeln!(f)?;
        writeln!(f, "Batches (nodes in one batch can run in parallel):")?;
        if self.batches.is_empty() {
            writeln!(f, "  (no nodes)")?;
        }
        for (k, batch) in self.batches.iter().enumerate() {
            let nodes: Vec<String> = batch.iter().map(|(id, w)| format!("{id} ({w})")).collect();
            writeln!(f, "  {}: {}", k + 1, nodes.join(", "))?;
        }
        section(f, "Branches", &self.branches)?;
        section(f, "Map and loop bodies", &self.repeats)?;
        section(f, "Approval gates", &self.gates)?;
        section(f, "Waits for signals", &self.waits)?;
        if !self.exit_handlers.is_empty() {
            writeln!(f)?;
            writeln!(f, "Exit handlers (after the main DAG, awaited):")?;
            for (trigger, node) in &self.exit_handlers {
                writeln!(f, "  {trigger}: {node}")?;
            }
        }
        section(f, "Calls (attempts, retries, timeout)", &self.calls)?;
        section(f, "Schedules (runs started on a clock)", &self.schedules)?;
        section(
            f,
            "Event triggers (runs started by messages)",
            &self.triggers,
        )?;
        section(
            f,
            "Agent limits (mesh-wide; where definitions differ, the smallest applies)",
            &self.agent_limits,
        )
    }
}

fn section(f: &mut fmt::Formatter<'_>, title: &str, rows: &[(String, String)]) -> fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(f)?;
    writeln!(f, "{title}:")?;
    for (id, text) in rows {
        writeln!(f, "  {id}: {text}")?;
    }
    Ok(())
}
