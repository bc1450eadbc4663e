//! Agent cards on a real nats-server: a card too large for one message still reaches the
//! mesh (its diagram in the object store), and cards of agents that stop publishing leave
//! the registry.

use std::fmt::Write as _;
use std::time::Duration;

use futures::StreamExt;
use messages::card::AgentCard;
use messages::subjects;
use serde_json::json;
use workflow_node::definition::{parse_str, Workflow};
use workflow_node::shell::{full_card, Config, WorkflowNode};

const TIMEOUT: Duration = Duration::from_secs(30);

fn wf(yaml: &str) -> Workflow {
    parse_str(yaml, "test.yaml").unwrap_or_else(|p| panic!("{p:?}"))
}

/// A valid workflow of `n` agent nodes in a chain, each with a long id and a long input:
/// its card (the file and a diagram that repeats every id) is well over NATS's default
/// 1 MiB payload, the file itself under it (`max_nodes` allows 1000 nodes).
fn huge_workflow(n: usize) -> String {
    // 188 characters.
    const ID: &str = concat!(
        "a_step_of_a_chain_with_a_long_name_that_the_diagram_repeats_in_every_edge_",
        "and_in_every_node_so_that_the_card_grows_faster_than_the_file_does_which_",
        "keeps_the_file_under_the_payload_limit_xx"
    );
    let mut yaml = String::from(
        "name: Huge\nworkflow:\n  description: a very long chain\n  \
         input_schema: {type: object}\n  nodes:\n",
    );
    for i in 0..n {
        let depends = if i == 0 {
            String::new()
        } else {
            format!(", depends_on: [{ID}_{}]", i - 1)
        };
        let _ = writeln!(
            yaml,
            "    - {{id: {ID}_{i}, type: agent, agent_name: Echo{depends}, input: \
             {{note: \"step {i} of a long chain that carries a fairly long note to make the \
             card large, and then some more words so that every node weighs a few hundred bytes\", value: \"{{{{workflow.input}}}}\"}}}}"
        );
    }
    let _ = writeln!(
        yaml,
        "  output_mapping: {{last: \"{{{{{ID}_{}.output}}}}\"}}",
        n - 1
    );
    yaml
}

#[tokio::test]
async fn a_card_over_the_payload_limit_reaches_the_mesh_with_its_diagram_in_the_object_store() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let workflow = wf(&huge_workflow(1000));
    let full = workflow_node::visual::agent_card(&workflow, "mesh");
    let limit = client.server_info().max_payload;
    let full_size = serde_json::to_vec(&full).unwrap().len();
    assert!(
        full_size > limit,
        "the test card ({full_size} B) must exceed {limit} B"
    );

    let mut cards = client
        .subscribe(subjects::agent_cards("mesh"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let node = WorkflowNode::start(client.clone(), vec![workflow], Config::default())
        .await
        .expect("the node serves a valid workflow, however large");
    let msg = tokio::time::timeout(TIMEOUT, async {
        loop {
            let msg = cards.next().await.expect("subscription open");
            let card: AgentCard = serde_json::from_slice(&msg.payload).unwrap();
            if card.name == "Huge" {
                return msg;
            }
        }
    })
    .await
    .expect("the card arrives on the discovery subject");
    assert!(msg.payload.len() <= limit, "{} B", msg.payload.len());
    let card: AgentCard = serde_json::from_slice(&msg.payload).unwrap();
    assert!(card.is_workflow());
    assert!(card.schemas().0.is_some(), "the schemas stay in the card");
    assert!(
        card.mermaid_source().is_none(),
        "the diagram is stored apart"
    );
    assert!(card.visualization_ref().is_some());

    let fetched = full_card(&client, "mesh", card)
        .await
        .expect("the diagram is retrievable");
    assert_eq!(fetched.mermaid_source(), full.mermaid_source());
    assert_eq!(fetched.workflow_config(), full.workflow_config());
    assert_eq!(fetched, full);
    node.shutdown().await;
}

const CALLS_FLEETING: &str = r#"
name: CallsFleeting
workflow:
  description: calls an agent that published its card once
  nodes:
    - {id: call, type: agent, agent_name: Fleeting, input: {}}
  output_mapping: {}
"#;

#[tokio::test]
async fn a_card_not_republished_expires_from_the_registry_but_our_own_never_do() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let config = Config {
        card_interval: Duration::from_millis(200),
        card_wait: Duration::from_millis(300),
        ..Config::default()
    };
    let node = WorkflowNode::start(client.clone(), vec![wf(CALLS_FLEETING)], config)
        .await
        .unwrap();
    let fleeting = AgentCard::new("Fleeting", "here and gone", "nats:nowhere", "1.0.0");
    client
        .publish(
            subjects::agent_cards("mesh"),
            serde_json::to_vec(&fleeting).unwrap().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();

    let registry = node.registry();
    let seen = poll(|| registry.get("Fleeting").is_some()).await;
    assert!(seen, "the card arrives");
    // Expiry is 3 card intervals (600 ms); poll for up to 10 s.
    let gone = poll(|| registry.get("Fleeting").is_none()).await;
    assert!(gone, "the card expires: {:?}", registry.names());
    assert!(
        registry.get("CallsFleeting").is_some(),
        "our own card never expires"
    );
    assert!(!registry.names().contains(&"Fleeting".to_owned()));

    let r = agent_sdk::workflow::invoke(
        &client,
        "mesh",
        "CallsFleeting",
        &json!({}),
        TIMEOUT,
        |_| {},
    )
    .await
    .expect("a result");
    assert_eq!(r.status, "failure");
    let e = r.error.unwrap_or_default();
    assert!(e.contains("has no card"), "{e}");
    node.shutdown().await;
}

/// Polls `check` every 50 ms for up to 10 s; whether it came true.
async fn poll(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A caller that sees a workflow's card calls it at once: the request finds a responder
/// (the card goes out only once the server knows the node's subscriptions).
#[tokio::test]
async fn a_card_goes_out_only_once_a_request_finds_a_responder() {
    let server = test_harness::nats();
    let caller = async_nats::connect(server.url()).await.expect("connect");
    let mut cards = caller
        .subscribe(subjects::agent_cards("mesh"))
        .await
        .expect("subscribe");
    agent_sdk::Mesh::new(caller.clone())
        .roundtrip()
        .await
        .expect("the server took the subscription");
    let mut nodes = Vec::new();
    for i in 0..10 {
        let name = format!("Fresh{i}");
        let yaml = format!(
            "name: {name}\nworkflow:\n  description: d\n  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{x: 1}}\n"
        );
        let wf = parse_str(&yaml, "fresh.yaml").expect("valid");
        let client = async_nats::connect(server.url()).await.expect("connect");
        let node = tokio::spawn(WorkflowNode::start(client, vec![wf], Config::default()));
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), cards.next())
                .await
                .expect("a card in time")
                .expect("subscription open");
            let card: AgentCard = serde_json::from_slice(&msg.payload).expect("a card");
            if card.name == name {
                break;
            }
        }
        let inbox = caller.new_inbox();
        let mut replies = caller.subscribe(inbox.clone()).await.expect("subscribe");
        caller
            .publish_with_reply(subjects::agent_request("mesh", &name), inbox, "{}".into())
            .await
            .expect("publish");
        let reply = tokio::time::timeout(Duration::from_secs(30), replies.next())
            .await
            .expect("an answer in time")
            .expect("subscription open");
        assert_ne!(
            reply.status,
            Some(async_nats::StatusCode::NO_RESPONDERS),
            "{name}'s card came before its request subscription"
        );
        nodes.push(node.await.expect("join").expect("node"));
    }
}

/// A card is what any client on the mesh may publish: a reference in it to another bucket
/// must not make the node (the CLI's `runs show`, the web view's card page) read that
/// bucket. The node's own reading once read whatever bucket a card named, unbounded.
#[tokio::test]
async fn a_card_naming_a_foreign_bucket_is_refused_not_read() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let secrets = js
        .create_object_store(async_nats::jetstream::object_store::Config {
            bucket: "someone_elses".into(),
            ..Default::default()
        })
        .await
        .expect("a bucket of another tenant");
    let mut private: &[u8] = br#"{"mermaid": "their private diagram"}"#;
    secrets
        .put("diagram", &mut private)
        .await
        .expect("an object in it");
    let full = workflow_node::visual::agent_card(&wf(&huge_workflow(2)), "mesh");
    let forged = full.with_visualization_ref("nats-object://someone_elses/diagram".into());

    let read = full_card(&client, "mesh", forged).await;

    let err = read.expect_err("another bucket is not read");
    assert!(
        err.to_string().contains("someone_elses"),
        "the refusal names the bucket: {err}"
    );
}
