//! Bounded input under the shipped configuration: what a caller puts in a subject or a
//! header is checked before anyone publishes to it. A subject longer than the server's
//! control line would make the server drop the connection of whoever publishes to it
//! (the node, an agent, the web view), failing other callers' runs each time.

use std::net::SocketAddr;

use agent_sdk::Mesh;
use async_nats::HeaderMap;
use futures::StreamExt;
use messages::a2a::{Message, Part, Role};
use messages::jsonrpc::{codes, Outcome, Request, Response};
use messages::{headers, subjects};
use serde_json::{json, Value};
use workflow_node::web::{Access, Web};

use crate::support::security::{node, stubs_file, Secure, Watched, WAIT};

const NS: &str = "mesh";

/// A request to `subject` with `headers`, answered on the sender's inbox: the answer.
async fn ask(watched: &Watched, subject: &str, headers: HeaderMap) -> Response {
    let (answer, _) = ask_with(watched, subject, headers, json!({"text": "hi"})).await;
    answer
}

/// A `message/send` of `data` to `subject` with `headers`, answered on the sender's inbox:
/// the answer, and its size in bytes.
async fn ask_with(
    watched: &Watched,
    subject: &str,
    headers: HeaderMap,
    data: Value,
) -> (Response, usize) {
    let data = data.as_object().expect("an object").clone();
    let message = Message::new("m1", Role::User, vec![Part::data(data)]);
    let body = serde_json::to_vec(&Request::message_send("r1", message)).unwrap();
    let answer = tokio::time::timeout(
        WAIT,
        watched
            .client
            .request_with_headers(subject.to_owned(), headers, body.into()),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    let response = serde_json::from_slice(&answer.payload).expect("a JSON-RPC response");
    (response, answer.payload.len())
}

/// `header: value` alone.
fn with(header: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header, value);
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subjects_and_headers_too_long_are_refused_and_cost_no_connection() {
    let secure = Secure::start();
    let (_node, node_conn) = node(&secure).await;
    let agents = secure.connect("agents").await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .expect("stub agents serve as user agents");
    let ops = secure.connect("ops").await;
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(ops.client.clone(), NS, None, Access::default(), addr)
        .await
        .expect("the web view starts as user ops");
    let alice = secure.connect("alice").await;
    let bob = secure.connect("bob").await;
    let bob_mesh = Mesh::new(bob.client.clone()).timeout(WAIT);
    let catalog = bob_mesh.catalog().await.unwrap();
    for name in ["EchoJson", "Echo"] {
        assert!(
            catalog.wait_for(name, WAIT).await.is_some(),
            "no card of {name}"
        );
    }

    // Alice asks the workflow and the agent to answer on a subject too long for the server,
    // or names herself at length.
    let long = format!("_INBOX.alice.{}", "x".repeat(5000));
    let attacks = [
        (headers::STATUS_TO, long.as_str(), "longer than 256 bytes"),
        (headers::REPLY_TO, long.as_str(), "longer than 256 bytes"),
        (headers::CALLER, &long[..1000], "Mesh-Caller is refused"),
    ];
    for target in ["EchoJson", "Echo"] {
        for (header, value, why) in attacks {
            let subject = subjects::agent_request(NS, target);
            let answer = ask(&alice, &subject, with(header, value)).await;
            let Outcome::Error(e) = &answer.outcome else {
                panic!("{target} took a request with a long {header}: {answer:?}");
            };
            assert_eq!(e.code, codes::INVALID_PARAMS, "{e:?}");
            assert!(e.message.contains(why), "{target}, {header}: {}", e.message);
            assert!(e.message.len() < 300, "a short refusal: {}", e.message);
        }
    }
    // And the web view to start a run of a workflow whose name is no subject token.
    let path = format!("/api/workflows/{}/runs", "x".repeat(5000));
    let answer = test_harness::http::post(web.addr(), &path, &json!({"input": {}})).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.body.contains("longer than 128"), "{}", answer.body);

    // Bob's runs all succeed, and nobody's connection was dropped.
    let runs = (0..10).map(|i| {
        let call = bob_mesh
            .agent("EchoJson")
            .call(json!({"text": format!("bob {i}")}));
        async move { (i, call.await) }
    });
    for (i, output) in futures::future::join_all(runs).await {
        let output = output.unwrap_or_else(|e| panic!("bob's run {i} failed: {e}"));
        assert_eq!(output, json!({"text": format!("bob {i}")}));
    }
    for (who, conn) in [
        ("node", &node_conn),
        ("agents", &agents),
        ("web view (ops)", &ops),
        ("alice", &alice),
    ] {
        assert_eq!(
            conn.disconnects().await,
            0,
            "{who}'s connection was dropped"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_input_that_breaks_the_schema_gets_a_short_refusal() {
    let secure = Secure::start();
    let (_node, _conn) = node(&secure).await;
    let alice = secure.connect("alice").await;
    // 100 strings of 8 KiB where MapDouble's input schema wants numbers: 800 KiB, every
    // item a violation.
    let numbers = vec!["x".repeat(8 << 10); 100];
    let subject = subjects::agent_request(NS, "MapDouble");
    let (answer, size) = ask_with(
        &alice,
        &subject,
        HeaderMap::new(),
        json!({"numbers": numbers}),
    )
    .await;
    let Outcome::Result(reply) = &answer.outcome else {
        panic!("not a task: {answer:?}");
    };
    let messages::AgentReply::Task(task) = reply.as_ref() else {
        panic!("not a task: {reply:?}");
    };
    assert_eq!(task.status.state, messages::TaskState::Failed);
    let text = task
        .status
        .message
        .as_ref()
        .map(Message::text)
        .unwrap_or_default();
    // Only the start of a refusal is shown: the one before was all of the input.
    let text = text.chars().take(2000).collect::<String>();
    assert!(
        text.contains("does not match the input_schema of MapDouble"),
        "{text}"
    );
    assert!(text.contains("/numbers/0: \"xxx"), "{text}");
    assert!(text.contains("and more"), "{text}");
    assert!(size < 8 << 10, "a refusal of {size} bytes: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_discovery_pings_gets_few_cards() {
    let secure = Secure::start();
    let (_node, _conn) = node(&secure).await;
    let agents = secure.connect("agents").await;
    let _stubs = agent_sdk::serve_stubs(agents.client.clone(), NS, stubs_file())
        .await
        .expect("stub agents serve as user agents");
    let alice = secure.connect("alice").await;
    let mut cards = alice
        .client
        .subscribe(subjects::agent_cards(NS))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    const PINGS: usize = 5000;
    for _ in 0..PINGS {
        alice
            .client
            .publish(subjects::discovery_ping(NS), "".into())
            .await
            .unwrap();
    }
    alice.client.flush().await.unwrap();
    // Every card that comes in the next three seconds is counted, by name: what the pings
    // made, and what is still owed for them at the end of a gap.
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let window = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while let Ok(Some(msg)) = tokio::time::timeout_at(window, cards.next()).await {
        let card: messages::AgentCard = serde_json::from_slice(&msg.payload).expect("a card");
        *counts.entry(card.name).or_default() += 1;
    }
    let gaps = started.elapsed().as_secs_f64() / agent_sdk::pings::PING_ANSWER_GAP.as_secs_f64();
    // At most one card per gap that passed, one at its start, and one on the card
    // interval, for each agent and workflow.
    let most = gaps.ceil() as usize + 2;
    for name in ["Echo", "Doubler", "EchoJson", "MapDouble"] {
        assert!(counts.contains_key(name), "no card of {name}: {counts:?}");
    }
    for (name, count) in &counts {
        assert!(
            *count <= most,
            "{PINGS} pings made {count} cards of {name} (at most {most} expected): {counts:?}"
        );
    }
}

/// `GET path` of the web view until `done` holds of its answer (the view's catalog takes
/// cards in the background); fails after [`WAIT`].
async fn web_until(
    web: &Web,
    path: &str,
    done: impl Fn(&test_harness::http::Answer) -> bool,
) -> test_harness::http::Answer {
    let give_up = tokio::time::Instant::now() + WAIT;
    loop {
        let answer = test_harness::http::get(web.addr(), path).await;
        if done(&answer) {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "GET {path}: {}",
            answer.body
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_keeps_few_cards_and_reads_diagrams_only_from_the_card_bucket() {
    let secure = Secure::start();
    let (_node, node_conn) = node(&secure).await;
    let ops = secure.connect("ops").await;
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let web = Web::start(ops.client.clone(), NS, None, Access::default(), addr)
        .await
        .expect("the web view starts as user ops");
    let agents = secure.connect("agents").await;
    let card = |name: &str| messages::AgentCard::new(name, "flood", "nats:x", "1");

    // A caller's input, in the artifact bucket; a card (any agent user may publish one)
    // whose diagram refers to it.
    let secret = json!({"card_number": "4111 1111 1111 1111"});
    let uri = agent_sdk::ArtifactStore::new(node_conn.client.clone(), NS)
        .put_json("bob-input.json", &secret)
        .await
        .expect("the node stores an input");
    let spy = card("Spy").with_visualization_ref(uri);
    let publish = |card: messages::AgentCard| {
        let client = agents.client.clone();
        async move {
            let bytes = serde_json::to_vec(&card).unwrap();
            client
                .publish(subjects::agent_cards(NS), bytes.into())
                .await
                .unwrap();
        }
    };
    publish(spy).await;
    let answer = web_until(&web, "/api/cards/Spy", |a| a.status != 404).await;
    assert!(answer.status >= 400, "{}: {}", answer.status, answer.body);
    assert!(!answer.body.contains("4111"), "{}", answer.body);

    // A flood of cards under new names: the view keeps at most its cap.
    let flood = agent_sdk::cards::MAX_CARDS + 500;
    for i in 0..flood {
        publish(card(&format!("Flood{i}"))).await;
    }
    publish(card("Last")).await;
    agents.client.flush().await.unwrap();
    web_until(&web, "/api/cards/Last", |a| a.status == 200).await;
    let listed = test_harness::http::get(web.addr(), "/api/cards").await;
    let listed = listed.json();
    let count = listed.as_array().expect("a list").len();
    assert!(
        count <= agent_sdk::cards::MAX_CARDS,
        "{count} cards kept of {flood} flooded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_and_bucket_the_node_makes_has_a_byte_limit() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    // A runs bucket an older version made, without a limit.
    js.create_key_value(async_nats::jetstream::kv::Config {
        bucket: "mesh_wf_runs".into(),
        history: 1,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut limits = workflow_node::limits::StoreLimits::default();
    for (i, name) in workflow_node::limits::StoreLimits::NAMES.iter().enumerate() {
        limits.set(name, (3 + i as u64) << 20).unwrap();
    }
    let (workflows, problems) = workflow_node::definition::load_paths(&[
        crate::support::security::repo().join("examples/workflows/echo.json"),
    ]);
    assert!(problems.is_empty(), "{problems:?}");
    let config = workflow_node::shell::Config {
        store_limits: limits,
        ..Default::default()
    };
    let _node = workflow_node::shell::WorkflowNode::start(client.clone(), workflows, config)
        .await
        .expect("the node starts");
    // The object stores are made when first used: as the node makes them.
    let artifacts = agent_sdk::ArtifactStore::new(client.clone(), NS).capacity(limits.artifacts);
    artifacts.put_json("x", &json!({})).await.unwrap();

    let expected = [
        ("KV_mesh_wf_runs", limits.runs),
        ("KV_mesh_wf_timers", limits.wakes),
        ("KV_mesh_wf_defs", limits.versions),
        ("KV_mesh_wf_secrets", limits.secrets),
        ("mesh_WF_EchoJson", limits.events),
        ("mesh_wf_history", limits.history),
        ("OBJ_mesh_artifacts", limits.artifacts),
    ];
    for (stream, bytes) in expected {
        let mut stream_handle = js.get_stream(stream).await.expect(stream);
        let info = stream_handle.info().await.unwrap();
        assert_eq!(info.config.max_bytes, bytes as i64, "{stream}");
    }
    // Nothing else the node made is unbounded.
    let mut names = js.stream_names();
    while let Some(name) = names.next().await {
        let name = name.unwrap();
        let info = js
            .get_stream(&name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert!(info.config.max_bytes > 0, "stream {name} has no byte limit");
    }
}
