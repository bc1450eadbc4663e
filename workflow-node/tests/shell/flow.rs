//! Flow control per workflow over a real nats-server with two replicas: runs of a workflow
//! with `concurrency_key` or `max_concurrent_runs` queue for a slot, shared by every
//! replica. What holds is seen from the agent's side: how many calls are in flight at once,
//! per key and in all, and in which order the runs reached it.

use std::time::Duration;

use agent_sdk::workflow::{invoke, relay};
use futures::StreamExt;
use messages::a2a::{AgentReply, Message, Role, TaskState};
use messages::jsonrpc::Request;
use messages::payload::wrap;
use serde_json::{json, Value};
use workflow_node::definition::parse_str;
use workflow_node::shell::{run::names, Config, MetricsConfig, Otlp, WorkflowNode};

use crate::support::flow::{Recorder, Seen};

const TIMEOUT: Duration = Duration::from_secs(120);

const PER_KEY: &str = r#"
name: PerKey
workflow:
  description: one call per customer at a time
  concurrency_key: {key: "{{workflow.input.customer}}", max: 1}
  nodes:
    - {id: a, type: agent, agent_name: Rec, input: {customer: "{{workflow.input.customer}}", label: "{{workflow.input.label}}"}}
    - {id: b, type: agent, agent_name: Rec, depends_on: [a], input: {customer: "{{workflow.input.customer}}", label: "{{workflow.input.label}}"}}
  output_mapping: {label: "{{b.output.label}}"}
"#;

const TOTAL: &str = r#"
name: Total
workflow:
  description: at most two runs at once, first by priority
  max_concurrent_runs: 2
  nodes:
    - {id: a, type: agent, agent_name: Rec, input: {customer: all, label: "{{workflow.input.label}}"}}
  output_mapping: {label: "{{a.output.label}}"}
"#;

const ONE: &str = r#"
name: One
workflow:
  description: one run at a time
  max_concurrent_runs: 1
  priority: 4
  nodes:
    - {id: a, type: agent, agent_name: Rec, input: {customer: one, label: "{{workflow.input.label}}"}}
  output_mapping: {label: "{{a.output.label}}"}
"#;

/// A nats-server, the recording agent and two replicas serving `yamls`.
struct Flow {
    _server: test_harness::NatsServer,
    client: async_nats::Client,
    rec: Recorder,
    _agent: agent_sdk::AgentHandle,
    replicas: Vec<WorkflowNode>,
}

async fn flow(yamls: &[&str]) -> Flow {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let rec = Recorder::new();
    let agent = rec.serve(client.clone()).await;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        // Each replica on a connection of its own, as separate processes would be.
        let own = async_nats::connect(server.url()).await.expect("connect");
        let wfs = yamls
            .iter()
            .map(|y| parse_str(y, "f.yaml").expect("valid"))
            .collect();
        let config = Config {
            metrics: MetricsConfig {
                addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                otlp: Otlp::Off,
                ..MetricsConfig::default()
            },
            ..Config::default()
        };
        replicas.push(WorkflowNode::start(own, wfs, config).await.expect("node"));
    }
    Flow {
        _server: server,
        client,
        rec,
        _agent: agent,
        replicas,
    }
}

impl Flow {
    /// Starts a run of `workflow` with task id `task`, `input` and the request's
    /// `metadata.priority` if given; the answer is its final reply.
    fn start(
        &self,
        workflow: &str,
        task: &str,
        input: Value,
        priority: Option<Value>,
    ) -> tokio::task::JoinHandle<AgentReply> {
        let mut message = Message::new(task.to_owned(), Role::User, vec![wrap(input)]);
        message.task_id = Some(task.to_owned());
        if let Some(p) = priority {
            message.metadata = json!({ "priority": p }).as_object().cloned();
        }
        let request = Request::message_send(task, message);
        let (client, workflow) = (self.client.clone(), workflow.to_owned());
        tokio::spawn(async move {
            relay(
                &client,
                "mesh",
                &workflow,
                &request,
                None,
                TIMEOUT.into(),
                |_| {},
            )
            .await
            .expect("a final reply")
        })
    }

    /// Waits until `workflow`'s gate entry `gate` satisfies `done` (watched, not polled).
    async fn gate(&self, key: &str, done: impl Fn(&Value) -> bool) -> Value {
        let js = async_nats::jetstream::new(self.client.clone());
        let bucket = js
            .get_key_value(names::flow_bucket("mesh"))
            .await
            .expect("flow bucket");
        let mut watch = bucket.watch_with_history(key).await.expect("watch");
        let seen = tokio::time::timeout(TIMEOUT, async {
            while let Some(Ok(entry)) = watch.next().await {
                let gate: Value = serde_json::from_slice(&entry.value).unwrap_or(Value::Null);
                if done(&gate) {
                    return gate;
                }
            }
            panic!("the watch of {key} ended");
        });
        seen.await.expect("the gate reached the state awaited")
    }

    /// Scrapes both replicas until their `workflow_runs_queued` of `workflow` sums to `n`.
    async fn queued_metric(&self, workflow: &str, n: f64) {
        let addrs: Vec<_> = self
            .replicas
            .iter()
            .map(|r| r.metrics_addr().expect("metrics are served"))
            .collect();
        let labels = [("workflow", workflow)];
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let mut sum = 0.0;
            for addr in &addrs {
                sum += crate::support::metrics::scrape(*addr)
                    .await
                    .sum("workflow_runs_queued", &labels);
            }
            if sum == n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "queued runs: {sum}, not {n}"
            );
            // Metrics are read by scraping, as a monitoring system does.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.rec.seen.lock().unwrap())
    }
}

fn waiting(gate: &Value) -> usize {
    gate["waiting"].as_array().map_or(0, Vec::len)
}

fn state(reply: &AgentReply) -> (TaskState, String) {
    match reply {
        AgentReply::Task(t) => (
            t.status.state,
            t.status
                .message
                .as_ref()
                .map(Message::text)
                .unwrap_or_default(),
        ),
        other => panic!("not a task: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_runs_over_three_keys_never_overlap_on_one_key_across_two_replicas() {
    let f = flow(&[PER_KEY]).await;
    let runs = (0..20).map(|i| {
        let input = json!({"customer": format!("c{}", i % 3), "label": format!("r{i}")});
        let client = f.client.clone();
        async move {
            let r = invoke(&client, "mesh", "PerKey", &input, TIMEOUT, |_| {})
                .await
                .expect("a result");
            (i, r)
        }
    });
    for (i, r) in futures::future::join_all(runs).await {
        assert_eq!(r.status, "success", "run {i}: {:?}", r.error);
        assert_eq!(r.output, Some(json!({"label": format!("r{i}")})));
    }
    f.seen(|s| {
        assert_eq!(s.order.len(), 40, "two calls per run, each once");
        for key in ["c0", "c1", "c2"] {
            assert_eq!(
                s.max_per_key.get(key),
                Some(&1),
                "calls in flight for {key}"
            );
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_runs_go_by_priority_and_a_cancelled_one_leaves_the_queue() {
    let f = flow(&[ONE]).await;
    let gate = "One.all";
    let first = f.start("One", "first", json!({"label": "hold"}), None);
    f.gate(gate, |g| {
        g["holders"].as_array().is_some_and(|h| h.len() == 1)
    })
    .await;
    // Queued one after the other, so that arrival is known: low, high, gone, default.
    let low = f.start("One", "low", json!({"label": "low"}), Some(json!(5)));
    f.gate(gate, |g| waiting(g) == 1).await;
    let high = f.start("One", "high", json!({"label": "high"}), Some(json!(1)));
    f.gate(gate, |g| waiting(g) == 2).await;
    let gone = f.start("One", "gone", json!({"label": "gone"}), Some(json!(1)));
    f.gate(gate, |g| waiting(g) == 3).await;
    let plain = f.start("One", "plain", json!({"label": "plain"}), None);
    f.gate(gate, |g| waiting(g) == 4).await;

    let cancel = Request::tasks_cancel("cancel-gone", "gone");
    let subject = messages::subjects::agent_request("mesh", "One");
    let body = serde_json::to_vec(&cancel).expect("JSON");
    agent_sdk::signing::request(
        &f.client,
        subject,
        async_nats::HeaderMap::new(),
        body.into(),
        None,
    )
    .await
    .expect("the cancel is answered");
    let (gone_state, gone_text) = state(&gone.await.expect("task"));
    assert_eq!(gone_state, TaskState::Canceled, "{gone_text}");
    f.gate(gate, |g| waiting(g) == 3).await;

    f.rec.release.notify_one();
    for run in [first, low, high, plain] {
        let (s, text) = state(&run.await.expect("task"));
        assert_eq!(s, TaskState::Completed, "{text}");
    }
    // The workflow's priority (4) puts the run without one after `high` (1), before `low` (5).
    f.seen(|s| {
        assert_eq!(s.order, ["hold", "high", "plain", "low"]);
        assert_eq!(s.max_all, 1);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_runs_caps_runs_in_flight_over_both_replicas() {
    let f = flow(&[TOTAL]).await;
    let runs = (0..10).map(|i| {
        let input = json!({"label": format!("r{i}")});
        let client = f.client.clone();
        async move {
            invoke(&client, "mesh", "Total", &input, TIMEOUT, |_| {})
                .await
                .expect("a result")
        }
    });
    for r in futures::future::join_all(runs).await {
        assert_eq!(r.status, "success", "{:?}", r.error);
    }
    f.seen(|s| {
        assert_eq!(s.order.len(), 10);
        assert!(
            s.max_all <= 2,
            "{} runs' calls in flight at once",
            s.max_all
        );
    });
    let gate = f.gate("Total.all", |_| true).await;
    assert_eq!(gate["holders"], json!([]), "every slot given back: {gate}");
    assert_eq!(waiting(&gate), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_priorities_and_keys_are_refused_precisely_and_harm_no_other_run() {
    let f = flow(&[PER_KEY]).await;
    let input = json!({"customer": "c", "label": "x"});
    let refused = f.start("PerKey", "bad-priority", input.clone(), Some(json!("high")));
    let (s, text) = state(&refused.await.expect("task"));
    assert_eq!(s, TaskState::Failed);
    assert!(
        text.contains(
            "metadata.priority must be a whole number from 1 (first) to 5 (last), found \"high\""
        ),
        "{text}"
    );
    let no_key = f.start(
        "PerKey",
        "no-key",
        json!({"customer": {"id": 1}, "label": "x"}),
        None,
    );
    let good = f.start("PerKey", "good", input, Some(json!(2)));
    let (s, text) = state(&no_key.await.expect("task"));
    assert_eq!(s, TaskState::Failed);
    assert!(
        text.contains("concurrency_key.key must give a string, found {\"id\":1}"),
        "{text}"
    );
    let (s, text) = state(&good.await.expect("task"));
    assert_eq!(s, TaskState::Completed, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_says_so_to_its_caller_to_tasks_get_and_in_the_metrics() {
    let f = flow(&[ONE]).await;
    let first = f.start("One", "first", json!({"label": "hold"}), None);
    f.gate("One.all", |g| {
        g["holders"].as_array().is_some_and(|h| h.len() == 1)
    })
    .await;
    // The waiting run's caller hears each progress part; the test reads them as they come.
    let (tx, mut parts) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let mut message = Message::new(
        "waits".to_owned(),
        Role::User,
        vec![wrap(json!({"label": "w"}))],
    );
    message.task_id = Some("waits".to_owned());
    let request = Request::message_send("waits", message);
    let client = f.client.clone();
    let waiting_run = tokio::spawn(async move {
        relay(
            &client,
            "mesh",
            "One",
            &request,
            None,
            TIMEOUT.into(),
            |u| {
                let data = u.status.message.iter().flat_map(|m| m.parts.iter());
                for d in data.filter_map(|p| p.as_data()) {
                    let _ = tx.send(Value::Object(d.clone()));
                }
            },
        )
        .await
        .expect("a final reply")
    });
    let queued = tokio::time::timeout(TIMEOUT, async {
        while let Some(part) = parts.recv().await {
            if part["type"] == "workflow_run_queued" {
                return part;
            }
        }
        panic!("the progress ended without workflow_run_queued");
    })
    .await
    .expect("the caller hears that its run is queued");
    assert_eq!(queued["admitted"], json!(false), "{queued}");
    let got = agent_sdk::workflow::get_run(&f.client, "mesh", "One", "waits", None)
        .await
        .expect("tasks/get");
    assert_eq!(got.state, TaskState::Working);
    assert_eq!(got.run.status, messages::workflow::RunPhase::Queued);
    f.queued_metric("One", 1.0).await;

    f.rec.release.notify_one();
    let admitted = tokio::time::timeout(TIMEOUT, async {
        while let Some(part) = parts.recv().await {
            if part["type"] == "workflow_run_queued" && part["admitted"] == json!(true) {
                return;
            }
        }
        panic!("the progress ended without the admission");
    });
    admitted
        .await
        .expect("the caller hears that its run got its slot");
    for run in [first, waiting_run] {
        let (s, text) = state(&run.await.expect("task"));
        assert_eq!(s, TaskState::Completed, "{text}");
    }
    f.queued_metric("One", 0.0).await;
}
