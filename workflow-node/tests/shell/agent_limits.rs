//! Flow control per agent over a real nats-server with two replicas: an agent capped at 4
//! never has more than 4 calls in flight (counted by the agent itself), whatever the
//! fan-out and across workflows; waiting calls do not spend their timeout; a rate limit
//! spaces the calls out (counted from the agent's own timestamps).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_sdk::workflow::invoke;
use serde_json::json;
use workflow_node::definition::parse_str;
use workflow_node::shell::{Config, WorkflowNode};

/// What the capped agent saw.
#[derive(Default)]
struct Seen {
    now: AtomicUsize,
    max: AtomicUsize,
    starts: Mutex<Vec<Instant>>,
}

async fn agent(
    client: &async_nats::Client,
    name: &str,
    hold: Duration,
) -> (Arc<Seen>, agent_sdk::AgentHandle) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let handle = agent_sdk::AgentBuilder::new(name)
        .max_in_flight(256)
        .handler(agent_sdk::handler_fn(move |req: agent_sdk::NodeRequest| {
            let s = s.clone();
            async move {
                s.starts.lock().expect("lock").push(Instant::now());
                let n = s.now.fetch_add(1, Ordering::SeqCst) + 1;
                s.max.fetch_max(n, Ordering::SeqCst);
                // The agent's work: long enough for calls to overlap.
                tokio::time::sleep(hold).await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                Ok(req.input)
            }
        }))
        .serve(client.clone())
        .await
        .expect("agent");
    (seen, handle)
}

fn map(name: &str, limits: &str, timeout: &str) -> String {
    format!(
        r#"
name: {name}
workflow:
  description: a wide map against a limited agent
  agents: {limits}
  nodes:
    - {{id: each, type: map, items: "{{{{workflow.input.items}}}}", node: one, concurrency_limit: 50, max_items: 1000}}
    - {{id: one, type: agent, agent_name: Capped, timeout: {timeout}, input: {{i: "{{{{_map_item}}}}"}}}}
  output_mapping: {{results: "{{{{each.output.results}}}}"}}
"#
    )
}

async fn replicas(url: &str, files: &[String]) -> Vec<WorkflowNode> {
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let wfs = files
            .iter()
            .map(|f| parse_str(f, "w.yaml").expect("valid"))
            .collect();
        let own = async_nats::connect(url).await.expect("connect");
        nodes.push(
            WorkflowNode::start(own, wfs, Config::default())
                .await
                .expect("node"),
        );
    }
    nodes
}

async fn run_map(client: &async_nats::Client, workflow: &str, n: u32) {
    let items: Vec<u32> = (0..n).collect();
    let r = invoke(
        client,
        "mesh",
        workflow,
        &json!({"items": items}),
        Duration::from_secs(300),
        |_| {},
    )
    .await
    .expect("the run answers");
    let results = r
        .output
        .as_ref()
        .and_then(|o| o["results"].as_array().cloned());
    let expected: Vec<serde_json::Value> = (0..n).map(|i| json!({"i": i})).collect();
    assert_eq!(results, Some(expected), "{workflow}: {:?}", r.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_agent_never_has_more_than_its_cap_in_flight_and_waiting_spends_no_timeout() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (seen, _agent) = agent(&client, "Capped", Duration::from_millis(100)).await;
    // 200 calls of 100 ms, 4 at a time, take over 5 s: the last ones wait longer than
    // their 2.5 s timeout, which must not count while they wait.
    let file = map("Wide", "{Capped: {max_in_flight: 4}}", "2.5s");
    let _nodes = replicas(&server.url(), &[file]).await;
    run_map(&client, "Wide", 200).await;
    let max = seen.max.load(Ordering::SeqCst);
    assert!(max <= 4, "the agent had {max} calls in flight at once");
    assert!(
        max >= 2,
        "the calls never overlapped ({max}): the cap was not exercised"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workflows_sharing_a_capped_agent_keep_to_the_smaller_cap() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (seen, _agent) = agent(&client, "Capped", Duration::from_millis(40)).await;
    let one = map("One", "{Capped: {max_in_flight: 3}}", "60s");
    let two = map("Two", "{Capped: {max_in_flight: 8}}", "60s");
    let _nodes = replicas(&server.url(), &[one, two]).await;
    let (a, b) = (run_map(&client, "One", 60), run_map(&client, "Two", 60));
    tokio::join!(a, b);
    let max = seen.max.load(Ordering::SeqCst);
    assert!(max <= 3, "the agent had {max} calls in flight at once");
    assert!(max >= 2, "the calls never overlapped ({max})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_spaces_the_calls_out() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let (seen, _agent) = agent(&client, "Capped", Duration::from_millis(1)).await;
    let file = map("Paced", "{Capped: {rate: {calls: 4, per: 1s}}}", "60s");
    let _nodes = replicas(&server.url(), &[file]).await;
    run_map(&client, "Paced", 16).await;
    let mut starts = seen.starts.lock().expect("lock").clone();
    starts.sort();
    assert_eq!(starts.len(), 16);
    // In any window of half the period, at most 4 calls started: a call of one window would
    // have to reach the agent half a period late to be counted with the next window's
    // (the gate paces sends, the agent sees deliveries); unpaced, all 16 start at once.
    let window = Duration::from_millis(500);
    let most = (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|t| **t - starts[i] < window)
                .count()
        })
        .max()
        .unwrap_or(0);
    let offsets: Vec<u128> = starts
        .iter()
        .map(|t| (*t - starts[0]).as_millis())
        .collect();
    assert!(
        most <= 4,
        "{most} calls started within {window:?}: {offsets:?} ms"
    );
    assert!(
        most >= 2,
        "the calls were never close ({most}): the rate was not exercised"
    );
}

#[test]
fn a_wrong_agents_block_is_refused_with_every_problem_at_once_and_plan_shows_a_right_one() {
    let bad = map(
        "Bad",
        "{Capped: {max_in_flight: 0, rate: {calls: 3, per: 0s}}, Other: {rate: {per: 1s}}, Third: {}}",
        "1s",
    );
    let problems = parse_str(&bad, "bad.yaml").expect_err("invalid");
    let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let all = all.join("\n");
    for field in [
        "agents.Capped.max_in_flight",
        "agents.Capped.rate.per",
        "agents.Other.rate.calls",
        "agents.Third",
    ] {
        assert!(all.contains(field), "{field} not named in:\n{all}");
    }
    let good = map(
        "Good",
        "{Capped: {max_in_flight: 4, rate: {calls: 10, per: 1s}}}",
        "1s",
    );
    let wf = parse_str(&good, "good.yaml").expect("valid");
    let plan = workflow_node::visual::plan(&wf).to_string();
    assert!(
        plan.contains("Capped: at most 4 in flight, 10 calls per 1s"),
        "{plan}"
    );
}
