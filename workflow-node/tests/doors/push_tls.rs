//! Push notifications to `https://` receivers: the test's webhook served over TLS with a
//! certificate of a CA made for the test (`deploy/secure/gen-local.sh`). A door given that
//! CA with `--push-ca-file` delivers the notification; a door given another CA's file
//! refuses the receiver's certificate at the handshake, sends it nothing, and gives the
//! notification up at once (its claim says `given-up`) rather than retrying for minutes.

use axum::http::StatusCode;
use futures::StreamExt;
use serde_json::json;

use workflow_node::web::AccessArgs;

use super::push_lease::{door_with, hook_app, mesh, next_post, start_task};

/// Waits until a notification's claim in the bucket reads `outcome`: its key. The
/// harness's time bounds the whole wait, not each renewal of a claim held meanwhile: a
/// notification retried through all its tries (five minutes) does not settle in it.
async fn claim_settles(client: &async_nats::Client, outcome: &str) -> String {
    let bucket = async_nats::jetstream::new(client.clone())
        .get_key_value("mesh_a2a_push")
        .await
        .unwrap();
    let mut claims = bucket.watch_with_history("sent.>").await.unwrap();
    let give_up = tokio::time::Instant::now() + test_harness::http::TIMEOUT;
    loop {
        let entry = tokio::time::timeout_at(give_up, claims.next())
            .await
            .unwrap_or_else(|_| panic!("no claim became {outcome} in time"))
            .unwrap()
            .unwrap();
        if String::from_utf8_lossy(&entry.value).contains(&format!("\"{outcome}\"")) {
            return entry.key;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_notification_reaches_an_https_receiver_of_its_ca_and_not_of_another() {
    let dirs = tempfile::tempdir().unwrap();
    let ours = test_harness::tls::local_ca(&dirs.path().join("ours"));
    let other = test_harness::tls::local_ca(&dirs.path().join("other"));
    let (app, mut posts) = hook_app();
    let (addr, _receiver) = test_harness::tls::serve_local(&ours, app).await;
    let url = format!("https://{addr}/hook");
    let server = test_harness::nats();
    let client = async_nats::connect(server.url()).await.unwrap();
    let (_node, operator) = mesh(&client).await;

    let trusting = AccessArgs {
        push_allow_private: true,
        push_ca_file: Some(ours.join("ca.pem")),
        ..AccessArgs::default()
    };
    let web = door_with(&client, &operator, &trusting).await;
    let task = start_task(&web, &url).await;
    let post = next_post(&mut posts).await;
    assert_eq!(post.body["id"], json!(task), "{}", post.body);
    assert_eq!(post.state(), "input-required", "{}", post.body);
    let id = post.id.clone();
    post.answer.send(StatusCode::OK).unwrap();
    assert_eq!(
        claim_settles(&client, "delivered").await,
        format!("sent.{id}")
    );
    drop(web);

    let distrusting = AccessArgs {
        push_allow_private: true,
        push_ca_file: Some(other.join("ca.pem")),
        ..AccessArgs::default()
    };
    let web = door_with(&client, &operator, &distrusting).await;
    let refused = start_task(&web, &url).await;
    let key = claim_settles(&client, "given-up").await;
    assert_ne!(key, format!("sent.{id}"), "the new task's claim");
    // Refused at the handshake: the receiver saw no request of the second task.
    assert!(
        posts.try_recv().is_err(),
        "no POST for task {refused} reached the receiver"
    );
}

#[tokio::test]
async fn a_push_ca_file_that_holds_no_certificate_stops_the_door_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").unwrap();
    let args = AccessArgs {
        push_ca_file: Some(empty),
        ..AccessArgs::default()
    };
    let e = workflow_node::web::Access::new(&args)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--push-ca-file") && e.contains("empty.pem") && e.contains("no PEM certificate"),
        "{e}"
    );
}
