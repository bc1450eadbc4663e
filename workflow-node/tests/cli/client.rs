//! `agent_sdk::workflow::invoke` (behind `run` and `test`) against a stand-in workflow on a real
//! nats-server: a request met by silence is resent with the same ids; a refusal is an
//! error a caller can match.

use std::time::Duration;

use agent_sdk::workflow::{invoke, InvokeError};
use agent_sdk::Timing;
use futures::StreamExt;
use messages::a2a::{AgentReply, Message, Role, Task, TaskState, TaskStatus};
use messages::jsonrpc::{ErrorObject, Method, Request, Response};
use messages::subjects;
use serde_json::json;

/// What the stand-in does with the requests it receives, in order.
#[derive(Clone, Copy)]
enum Act {
    Drop,
    Answer,
    Refuse,
}

/// A plain subscriber on workflow `Wf`'s request subject acting out `acts`; returns the
/// (task id, message id) of each request.
async fn stand_in(
    client: &async_nats::Client,
    acts: Vec<Act>,
) -> tokio::task::JoinHandle<Vec<(Option<String>, String)>> {
    let mut requests = client
        .subscribe(subjects::agent_request("mesh", "Wf"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let client = client.clone();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        for act in acts {
            let msg = tokio::time::timeout(Duration::from_secs(10), requests.next())
                .await
                .expect("a request in time")
                .unwrap();
            let request = Request::from_slice(&msg.payload).unwrap();
            let Method::MessageSend(params) = request.method else {
                panic!("not a message/send")
            };
            let m = params.message;
            seen.push((m.task_id.clone(), m.message_id.clone()));
            let response = match act {
                Act::Drop => continue,
                Act::Refuse => Response::error(
                    Some(request.id.clone()),
                    ErrorObject::new(-32602, "no thanks"),
                ),
                Act::Answer => {
                    let mut status = TaskStatus::new(TaskState::Completed);
                    let parts = vec![messages::payload::wrap(json!({"ok": true}))];
                    status.message = Some(Message::new("r", Role::Agent, parts));
                    let task = Task {
                        id: "exec".into(),
                        context_id: "exec".into(),
                        status,
                        artifacts: None,
                        metadata: None,
                    };
                    Response::result(request.id.clone(), AgentReply::Task(task))
                }
            };
            let body = serde_json::to_vec(&response).unwrap();
            client
                .publish(msg.reply.clone().unwrap(), body.into())
                .await
                .unwrap();
        }
        seen
    })
}

fn timing() -> Timing {
    Timing {
        timeout: Duration::from_secs(10),
        resend_interval: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn a_request_met_by_silence_is_resent_with_the_same_ids() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let workflow = stand_in(&client, vec![Act::Drop, Act::Answer]).await;
    let r = invoke(&client, "mesh", "Wf", &json!({}), timing(), |_| {})
        .await
        .unwrap();
    assert_eq!(r.status, "success");
    assert_eq!(r.output, Some(json!({"ok": true})));
    let seen = workflow.await.unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0], seen[1],
        "the resend has the same task and message ids"
    );
    assert_eq!(seen[0].0.as_deref(), Some(seen[0].1.as_str()));
}

#[tokio::test]
async fn a_refusal_is_an_error_with_its_code() {
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let _workflow = stand_in(&client, vec![Act::Refuse]).await;
    match invoke(&client, "mesh", "Wf", &json!({}), timing(), |_| {}).await {
        Err(InvokeError::Refused { code, message, .. }) => {
            assert_eq!((code, message.as_str()), (-32602, "no thanks"))
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    match invoke(&client, "mesh", "Nobody", &json!({}), timing(), |_| {}).await {
        Err(InvokeError::NoResponders { workflow, .. }) => assert_eq!(workflow, "Nobody"),
        other => panic!("expected no responders, got {other:?}"),
    }
}
