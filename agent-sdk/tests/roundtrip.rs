//! `Mesh::roundtrip` against a real nats-server: a subscription made on one connection is known
//! to the server, for every other connection, once `roundtrip` returns (a flush alone is
//! not enough: another connection's request can still meet "no responders").

mod common;

use agent_sdk::Mesh;
use anyhow::Result;
use common::*;
use futures::StreamExt;

#[tokio::test]
async fn a_subscription_is_known_to_every_connection_after_a_roundtrip() -> Result<()> {
    let (server, caller) = setup().await?;
    let mut no_responders = 0;
    for i in 0..200 {
        let callee = async_nats::connect(server.url()).await?;
        let subject = format!("svc.{i}");
        let mut requests = callee.subscribe(subject.clone()).await?;
        Mesh::new(callee.clone()).roundtrip().await?;
        let inbox = caller.new_inbox();
        let mut replies = caller.subscribe(inbox.clone()).await?;
        caller
            .publish_with_reply(subject, inbox, "ping".into())
            .await?;
        // Either the request reaches the callee, or the server answers "no responders".
        tokio::select! {
            request = requests.next() => assert!(request.is_some(), "subscription {i} ended"),
            reply = replies.next() => {
                let reply = reply.expect("the inbox is open");
                assert_eq!(reply.status, Some(async_nats::StatusCode::NO_RESPONDERS));
                no_responders += 1;
            }
            _ = tokio::time::sleep(WAIT) => panic!("request {i}: neither delivered nor refused"),
        }
    }
    assert_eq!(no_responders, 0, "requests that met no responders");
    Ok(())
}
