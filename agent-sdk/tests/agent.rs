//! The SDK against a real nats-server: workflow calls, validation, errors, wrapping, the
//! object store, cards, cancel, plain calls and garbage.

mod common;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_sdk::{handler_fn, AgentBuilder, AgentError, CallError, CallOptions, Mesh, NodeRequest};
use anyhow::{Context, Result};
use async_nats::HeaderMap;
use bytes::Bytes;
use common::*;
use messages::card::{AgentCard, EXT_SCHEMAS};
use messages::jsonrpc::codes;
use messages::payload::{artifact_part, wrap};
use messages::{subjects, Outcome, ResultStatus, TaskState};
use serde_json::{json, Value};

fn number_schema() -> Value {
    json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "number"}}})
}

/// `Doubler`: `{n}` → `{n: 2n}`, counting its calls.
fn doubler(calls: Arc<AtomicUsize>) -> AgentBuilder {
    AgentBuilder::new("Doubler")
        .description("Doubles n")
        .input_schema(number_schema())
        .output_schema(number_schema())
        .handler(handler_fn(move |req: NodeRequest| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let n = req.input["n"].as_f64().unwrap_or(0.0);
                Ok(json!({"n": n * 2.0, "instruction": req.instruction,
                          "node": req.workflow.map(|w| w.node_id)}))
            }
        }))
}

#[tokio::test]
async fn a_workflow_call_gets_a_successful_node_result() -> Result<()> {
    let (_server, client) = setup().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let _agent = doubler(calls.clone()).serve(client.clone()).await?;

    // Reply through Mesh-Reply-To, as a workflow node does, with trace headers.
    let req = node_request("e1", "double", 2);
    let reply_subject = subjects::agent_response("mesh", "Wf", &sub_task("e1", "double", 2));
    let mut replies = client.subscribe(reply_subject.clone()).await?;
    let status_subject = subjects::agent_status("mesh", "Wf", &sub_task("e1", "double", 2));
    let mut statuses = client.subscribe(status_subject.clone()).await?;
    let mut headers = HeaderMap::new();
    headers.insert(messages::headers::REPLY_TO, reply_subject.as_str());
    headers.insert(messages::headers::STATUS_TO, status_subject.as_str());
    headers.insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    );
    headers.insert("tracestate", "vendor=x");
    let body = workflow_body(&req, Some("double it"), wrap(json!({"n": 21})));
    client
        .publish_with_headers(subjects::agent_request("mesh", "Doubler"), headers, body)
        .await?;

    let msg = next(&mut replies).await?;
    let h = msg.headers.clone().context("reply has headers")?;
    assert_eq!(h.get("Nats-Msg-Id").unwrap().as_str(), "e1_double_0_2");
    assert_eq!(
        h.get("traceparent").unwrap().as_str(),
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(h.get("tracestate").unwrap().as_str(), "vendor=x");
    let response: messages::Response = serde_json::from_slice(&msg.payload)?;
    assert_eq!(response.id, Some("e1_double_0_2".into()));
    let task = task(response)?;
    assert_eq!(task.id, "e1_double_0_2");
    assert_eq!(task.context_id, "e1");
    assert_eq!(task.status.state, TaskState::Completed);
    let result = node_result(&task)?;
    assert_eq!(result.status, ResultStatus::Success);
    assert_eq!(
        result.output,
        Some(json!({"n": 42.0, "instruction": "double it", "node": "double"}))
    );
    assert_eq!(result.retry_count, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A workflow's call gets no `working` update at once (the node drops bare ones and
    // times its calls out). One sent would have been published before the reply, on the
    // same connection, so it would be in hand already.
    let early = futures::FutureExt::now_or_never(futures::StreamExt::next(&mut statuses));
    assert!(
        early.is_none(),
        "a status update came before the reply: {early:?}"
    );
    Ok(())
}

#[tokio::test]
async fn input_violating_the_schema_never_reaches_the_handler() -> Result<()> {
    let (_server, client) = setup().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let _agent = doubler(calls.clone()).serve(client.clone()).await?;

    let (task, result) = call_node(
        &client,
        "Doubler",
        &node_request("e", "d", 1),
        json!({"n": "x"}),
    )
    .await?;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(result.status, ResultStatus::Failure);
    assert_eq!(
        result.error_kind.as_deref(),
        Some(agent_sdk::KIND_INPUT_VALIDATION)
    );
    let errors = result.validation_errors.context("validation_errors")?;
    assert!(errors[0].starts_with("input/n: "), "{errors:?}");

    // The request's own schema wins over the agent's.
    let mut req = node_request("e", "d2", 1);
    req.input_schema = Some(json!({"type": "object", "required": ["m"]}));
    let (_, result) = call_node(&client, "Doubler", &req, json!({"n": 1})).await?;
    assert_eq!(result.status, ResultStatus::Failure);
    assert!(result.validation_errors.unwrap()[0].contains("\"m\""));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn output_violating_the_schema_is_reported() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Liar")
        .output_schema(number_schema())
        .handler(handler_fn(|_| async { Ok(json!({"n": "not a number"})) }))
        .serve(client.clone())
        .await?;
    let (task, result) = call_node(&client, "Liar", &node_request("e", "l", 1), json!({})).await?;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(
        result.error_kind.as_deref(),
        Some(agent_sdk::KIND_OUTPUT_VALIDATION)
    );
    assert!(result.validation_errors.unwrap()[0].starts_with("output/n: "));
    Ok(())
}

#[tokio::test]
async fn a_handler_error_carries_its_kind() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Flaky")
        .handler(handler_fn(|_| async {
            Err::<Value, _>(AgentError::with_kind("upstream down", "transient"))
        }))
        .serve(client.clone())
        .await?;
    let (task, result) = call_node(&client, "Flaky", &node_request("e", "f", 3), json!({})).await?;
    assert_eq!(task.status.state, TaskState::Failed);
    assert_eq!(result.error_message.as_deref(), Some("upstream down"));
    assert_eq!(result.error_kind.as_deref(), Some("transient"));
    assert_eq!(result.retry_count, 2);

    let plain = Mesh::new(client.clone())
        .agent("Flaky")
        .timeout(WAIT)
        .call(json!({}))
        .await;
    match plain {
        Err(CallError::Failed { message, kind, .. }) => {
            assert_eq!(
                (message.as_str(), kind.as_deref()),
                ("upstream down", Some("transient"))
            )
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn non_object_inputs_and_outputs_are_wrapped() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Listify")
        .input_schema(json!({"type": "number"}))
        .handler(handler_fn(|req: NodeRequest| async move {
            Ok(json!([req.input, req.input]))
        }))
        .serve(client.clone())
        .await?;
    let (_, result) = call_node(&client, "Listify", &node_request("e", "n", 1), json!(5)).await?;
    assert_eq!(result.output, Some(json!([5, 5])));

    // A plain call: the reply's DataPart is wrapped on the wire and unwrapped by the Mesh's call.
    assert_eq!(
        Mesh::new(client.clone())
            .agent("Listify")
            .timeout(WAIT)
            .call(json!(7))
            .await?,
        json!([7, 7])
    );
    Ok(())
}

#[tokio::test]
async fn large_inputs_and_outputs_travel_through_the_object_store() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Big")
        .artifact_threshold(1024)
        .handler(handler_fn(|req: NodeRequest| async move {
            let text = req.input["text"].as_str().unwrap_or_default().to_owned();
            Ok(json!({"length": text.len(), "echo": text}))
        }))
        .serve(client.clone())
        .await?;
    let big = "x".repeat(300 * 1024);

    // A FilePart naming an object in the namespace's bucket.
    let artifacts = agent_sdk::ArtifactStore::new(client.clone(), "mesh");
    artifacts
        .put_json("inputs/big.json", &json!({"text": big}))
        .await?;
    let mut req = node_request("e", "big", 1);
    req.suggested_output_filename = Some("report.json".into());
    let body = workflow_body(
        &req,
        None,
        artifact_part(artifacts.bucket(), "inputs/big.json"),
    );
    let (response, _) = request(&client, "Big", HeaderMap::new(), body).await?;
    let result = node_result(&task(response)?)?;
    assert_eq!(result.status, ResultStatus::Success);
    assert_eq!(result.output, None);
    let name = result.artifact_name.context("artifact_name")?;
    // The task id, a random part (the key to the object), the suggested file name.
    let (task, rest) = name.split_once('/').context("a task id")?;
    let (random, file) = rest.split_once('/').context("a random part")?;
    assert_eq!((task, file), ("e_big_0_1", "report.json"));
    assert!(random.len() >= 32, "{random}");
    let stored = artifacts.get_json(artifacts.bucket(), &name).await?;
    assert_eq!(stored["length"], json!(big.len()));

    // The Mesh's call stores the large input and fetches the large output.
    let out = Mesh::new(client.clone())
        .agent("Big")
        .timeout(WAIT)
        .call(json!({"text": big}))
        .await?;
    assert_eq!(out["echo"].as_str().map(str::len), Some(big.len()));
    Ok(())
}

#[tokio::test]
async fn the_card_is_published_at_start_and_on_a_ping() -> Result<()> {
    let (_server, client) = setup().await?;
    let mut cards = client.subscribe(subjects::agent_cards("mesh")).await?;
    client.flush().await?;
    let _agent = doubler(Arc::default())
        .skill(agent_sdk::skill("double", "Double", "Doubles a number"))
        .serve(client.clone())
        .await?;
    let card: AgentCard = serde_json::from_slice(&next(&mut cards).await?.payload)?;
    assert_eq!(card.name, "Doubler");
    assert_eq!(card.url, "nats:mesh.a2a.v1.agent.request.Doubler");
    assert_eq!(card.skills[0].id, "double");
    assert!(card.extension(EXT_SCHEMAS).is_some());
    assert_eq!(
        card.schemas(),
        (Some(number_schema()), Some(number_schema()))
    );

    client
        .publish(subjects::discovery_ping("mesh"), Bytes::new())
        .await?;
    let again: AgentCard = serde_json::from_slice(&next(&mut cards).await?.payload)?;
    assert_eq!(again, card);
    Ok(())
}

#[tokio::test]
async fn the_card_is_republished_every_interval() -> Result<()> {
    let (_server, client) = setup().await?;
    let mut cards = client.subscribe(subjects::agent_cards("mesh")).await?;
    client.flush().await?;
    let _agent = doubler(Arc::default())
        .card_interval(Duration::from_millis(50))
        .serve(client.clone())
        .await?;
    for _ in 0..3 {
        let card: AgentCard = serde_json::from_slice(&next(&mut cards).await?.payload)?;
        assert_eq!(card.name, "Doubler");
    }
    Ok(())
}

#[tokio::test]
async fn a_cancel_broadcast_aborts_a_running_handler() -> Result<()> {
    let (_server, client) = setup().await?;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (dropped_tx, mut dropped) = tokio::sync::mpsc::unbounded_channel::<()>();
    struct OnDrop(tokio::sync::mpsc::UnboundedSender<()>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let _agent = AgentBuilder::new("Slow")
        .handler(handler_fn(move |req: NodeRequest| {
            let (started, dropped) = (started_tx.clone(), dropped_tx.clone());
            async move {
                let _guard = OnDrop(dropped);
                let _ = started.send(req.task_id);
                std::future::pending::<()>().await;
                Ok(Value::Null)
            }
        }))
        .serve(client.clone())
        .await?;

    let req = node_request("e", "slow", 1);
    let body = workflow_body(&req, None, wrap(json!({})));
    let reply = tokio::spawn({
        let client = client.clone();
        async move { request(&client, "Slow", HeaderMap::new(), body).await }
    });
    let task_id = tokio::time::timeout(WAIT, started.recv())
        .await?
        .context("started")?;
    assert_eq!(task_id, "e_slow_0_1");
    let cancel = messages::Request::tasks_cancel("c1", task_id.as_str());
    client
        .publish(
            subjects::agent_cancel("mesh", "Slow"),
            Bytes::from(serde_json::to_vec(&cancel)?),
        )
        .await?;

    let (response, _) = reply.await??;
    let task = task(response)?;
    assert_eq!(task.status.state, TaskState::Canceled);
    assert_eq!(
        node_result(&task)?.error_kind.as_deref(),
        Some(agent_sdk::KIND_CANCELED)
    );
    tokio::time::timeout(WAIT, dropped.recv())
        .await?
        .context("the handler's future was dropped")?;
    Ok(())
}

#[tokio::test]
async fn a_plain_message_send_works_through_call_agent() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = doubler(Arc::default()).serve(client.clone()).await?;
    let out = Mesh::new(client.clone())
        .agent("Doubler")
        .timeout(WAIT)
        .call(json!({"n": 4}))
        .await?;
    assert_eq!(out, json!({"n": 8.0, "instruction": null, "node": null}));

    let mut options = CallOptions::new(WAIT);
    options.instruction = Some("please".into());
    let out = Mesh::new(client.clone())
        .defaults(options)
        .agent("Doubler")
        .call(json!({"n": 1}))
        .await?;
    assert_eq!(out["instruction"], "please");

    match Mesh::new(client.clone())
        .agent("Doubler")
        .timeout(WAIT)
        .call(json!({"n": "x"}))
        .await
    {
        Err(CallError::Failed {
            validation_errors, ..
        }) => assert_eq!(validation_errors.len(), 1),
        other => panic!("expected a validation failure, got {other:?}"),
    }
    match Mesh::new(client.clone())
        .agent("Nobody")
        .timeout(WAIT)
        .call(json!({}))
        .await
    {
        Err(CallError::NoResponders(name)) => assert_eq!(name, "Nobody"),
        other => panic!("expected no responders, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn garbage_gets_an_error_reply_and_the_agent_keeps_serving() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = doubler(Arc::default()).serve(client.clone()).await?;
    for (body, code) in [
        (&b"\xff\x00 not json"[..], codes::PARSE_ERROR),
        (
            &br#"{"jsonrpc":"2.0","id":"x","method":"nope"}"#[..],
            codes::METHOD_NOT_FOUND,
        ),
        (
            &br#"{"jsonrpc":"2.0","id":"x","method":"message/send","params":{}}"#[..],
            codes::INVALID_PARAMS,
        ),
        (
            &br#"{"jsonrpc":"2.0","id":"x","method":"tasks/cancel","params":{"id":"none"}}"#[..],
            codes::TASK_NOT_FOUND,
        ),
    ] {
        let (response, _) = request(
            &client,
            "Doubler",
            HeaderMap::new(),
            Bytes::from_static(body),
        )
        .await?;
        match response.outcome {
            Outcome::Error(e) => assert_eq!(e.code, code, "{e:?}"),
            other => panic!("expected an error, got {other:?}"),
        }
    }
    // Garbage on the cancel subject is ignored.
    client
        .publish(
            subjects::agent_cancel("mesh", "Doubler"),
            Bytes::from_static(b"junk"),
        )
        .await?;
    let out = Mesh::new(client.clone())
        .agent("Doubler")
        .timeout(WAIT)
        .call(json!({"n": 1}))
        .await?;
    assert_eq!(out["n"], json!(2.0));
    Ok(())
}

#[tokio::test]
async fn a_panicking_handler_fails_the_call_not_the_agent() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Panicky")
        .handler(handler_fn(|req: NodeRequest| async move {
            if req.input.get("panic").is_some() {
                panic!("boom");
            }
            Ok(json!({"ok": true}))
        }))
        .serve(client.clone())
        .await?;
    let (_, result) = call_node(
        &client,
        "Panicky",
        &node_request("e", "p", 1),
        json!({"panic": 1}),
    )
    .await?;
    assert_eq!(result.status, ResultStatus::Failure);
    assert_eq!(
        Mesh::new(client.clone())
            .agent("Panicky")
            .timeout(WAIT)
            .call(json!({}))
            .await?,
        json!({"ok": true})
    );
    Ok(())
}

#[tokio::test]
async fn max_in_flight_bounds_concurrent_handlers() -> Result<()> {
    let (_server, client) = setup().await?;
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let _agent = AgentBuilder::new("Narrow")
        .max_in_flight(2)
        .handler(handler_fn({
            let (running, peak) = (running.clone(), peak.clone());
            move |_| {
                let (running, peak) = (running.clone(), peak.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(Value::Null)
                }
            }
        }))
        .serve(client.clone())
        .await?;
    let calls = (0..8).map(|_| {
        Mesh::new(client.clone())
            .agent("Narrow")
            .timeout(WAIT)
            .call(json!({}))
            .into_future()
    });
    for r in futures::future::join_all(calls).await {
        assert_eq!(r?, Value::Null);
    }
    assert!(peak.load(Ordering::SeqCst) <= 2);
    Ok(())
}

#[tokio::test]
async fn a_stopped_agent_no_longer_answers() -> Result<()> {
    let (_server, client) = setup().await?;
    let agent = doubler(Arc::default()).serve(client.clone()).await?;
    assert_eq!(agent.name(), "Doubler");
    agent.stop().await;
    client.flush().await?;
    match Mesh::new(client.clone())
        .agent("Doubler")
        .timeout(WAIT)
        .call(json!({"n": 1}))
        .await
    {
        Err(CallError::NoResponders(_)) => Ok(()),
        other => panic!("expected no responders, got {other:?}"),
    }
}

#[tokio::test]
async fn tasks_get_answers_a_finished_task_and_not_found_for_others() -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = doubler(Arc::default()).serve(client.clone()).await?;
    let get = |task: &str| {
        Bytes::from(serde_json::to_vec(&messages::Request::tasks_get("g", task)).unwrap())
    };
    let (unknown, _) = request(&client, "Doubler", HeaderMap::new(), get("t-get")).await?;
    match unknown.outcome {
        Outcome::Error(e) => assert_eq!(e.code, codes::TASK_NOT_FOUND, "{e:?}"),
        other => panic!("expected task not found, got {other:?}"),
    }
    let mut message =
        messages::Message::new("m-get", messages::Role::User, vec![wrap(json!({"n": 4}))]);
    message.task_id = Some("t-get".into());
    let send = Bytes::from(serde_json::to_vec(&messages::Request::message_send(
        "s", message,
    ))?);
    let (sent, _) = request(&client, "Doubler", HeaderMap::new(), send).await?;
    assert_eq!(task(sent)?.status.state, TaskState::Completed);
    let (known, _) = request(&client, "Doubler", HeaderMap::new(), get("t-get")).await?;
    let known = task(known)?;
    assert_eq!(known.id, "t-get");
    assert_eq!(known.status.state, TaskState::Completed);
    let parts = known.status.message.context("a message")?.parts;
    assert_eq!(
        messages::reply::output_part(&parts),
        Some(messages::reply::Output::Inline(
            json!({"n": 8.0, "instruction": null, "node": null})
        ))
    );
    Ok(())
}

#[tokio::test]
async fn calls_name_their_caller_in_mesh_caller() -> Result<()> {
    let (_server, client) = setup().await?;
    let _seen = AgentBuilder::new("Seer")
        .handler(handler_fn(|req: NodeRequest| async move {
            let caller = req
                .headers
                .get(messages::headers::CALLER)
                .map(|v| v.to_string());
            Ok(json!({"caller": caller}))
        }))
        .serve(client.clone())
        .await?;
    let inner = client.clone();
    let _relay = AgentBuilder::new("Relay")
        .handler(handler_fn(move |req: NodeRequest| {
            let client = inner.clone();
            async move {
                let mut options = CallOptions::new(WAIT);
                options.headers = req.onward_headers();
                Mesh::new(client.clone())
                    .defaults(options)
                    .agent("Seer")
                    .call(json!({}))
                    .await
                    .map_err(|e| AgentError::new(e.to_string()))
            }
        }))
        .serve(client.clone())
        .await?;
    let anonymous = Mesh::new(client.clone())
        .agent("Seer")
        .timeout(WAIT)
        .call(json!({}))
        .await?;
    assert_eq!(anonymous, json!({"caller": null}));
    let named = CallOptions::new(WAIT).with_caller("Planner");
    let named = Mesh::new(client.clone())
        .defaults(named)
        .agent("Seer")
        .call(json!({}))
        .await?;
    assert_eq!(named, json!({"caller": "Planner"}));
    let relayed = Mesh::new(client.clone())
        .agent("Relay")
        .timeout(WAIT)
        .call(json!({}))
        .await?;
    assert_eq!(relayed, json!({"caller": "Relay"}));
    Ok(())
}

#[tokio::test]
async fn inputs_come_only_from_the_mesh_bucket_and_replies_go_only_to_allowed_subjects(
) -> Result<()> {
    let (_server, client) = setup().await?;
    let _agent = AgentBuilder::new("Big")
        .handler(handler_fn(|req: NodeRequest| async move { Ok(req.input) }))
        .serve(client.clone())
        .await?;
    // An input in a bucket the caller chose: the agent does not read it for the caller.
    let body = workflow_body(
        &node_request("e", "big", 1),
        None,
        artifact_part("mesh_wf_cards", "secret.json"),
    );
    let (response, _) = request(&client, "Big", HeaderMap::new(), body).await?;
    let result = node_result(&task(response)?)?;
    assert_eq!(result.status, ResultStatus::Failure);
    let message = result.error_message.unwrap_or_default();
    assert!(
        message.contains("not in the mesh's artifact bucket 'mesh_artifacts'"),
        "{message}"
    );

    // A reply asked for on a KV subject is not sent there; a request answered on an inbox
    // afterwards shows the agent went on serving and wrote nothing there meanwhile.
    let mut kv = client.subscribe("$KV.>").await?;
    let mut h = HeaderMap::new();
    h.insert(messages::headers::REPLY_TO, "$KV.mesh_wf_runs.Wf.x");
    let body = workflow_body(&node_request("e", "big", 2), None, wrap(json!({"n": 1})));
    client
        .publish_with_headers(subjects::agent_request("mesh", "Big"), h, body)
        .await?;
    let out = Mesh::new(client.clone())
        .agent("Big")
        .timeout(WAIT)
        .call(json!({"n": 2}))
        .await?;
    assert_eq!(out["n"], json!(2));
    client.flush().await?;
    use futures::FutureExt;
    assert!(
        futures::StreamExt::next(&mut kv).now_or_never().is_none(),
        "the agent published to a KV subject"
    );
    Ok(())
}
