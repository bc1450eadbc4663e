use async_nats::jetstream::{self, object_store};
use crate::support::security::Secure;

#[tokio::test]
async fn probe() {
    let secure = Secure::start();
    let node = secure.connect("node").await;
    let js = jetstream::new(node.client.clone());
    let store = js.create_object_store(object_store::Config { bucket: "mesh_artifacts".into(), ..Default::default() }).await.unwrap();
    store.put("one", &mut &b"hello one"[..]).await.unwrap();
    let two = store.put("two", &mut &b"hello two"[..]).await.unwrap();
    let mut alice = secure.connect("alice").await;
    let show = |tag: &str, m: &async_nats::Message| println!("{tag}: status={:?} desc={:?} payload={}", m.status, m.description, String::from_utf8_lossy(&m.payload));
    for (tag, subj, body) in [
        ("wild M.*", "$JS.API.DIRECT.GET.OBJ_mesh_artifacts.$O.mesh_artifacts.M.*".to_string(), String::new()),
        ("cons C.*", "$JS.API.CONSUMER.CREATE.OBJ_mesh_artifacts.x1.$O.mesh_artifacts.C.*".to_string(), r#"{"stream_name":"OBJ_mesh_artifacts","config":{"name":"x1","filter_subject":"$O.mesh_artifacts.C.*","deliver_subject":"_INBOX.alice.zz","ack_policy":"none"}}"#.to_string()),
        ("cons ok", format!("$JS.API.CONSUMER.CREATE.OBJ_mesh_artifacts.x5.$O.mesh_artifacts.C.{}", two.nuid), format!(r#"{{"stream_name":"OBJ_mesh_artifacts","config":{{"name":"x5","filter_subject":"$O.mesh_artifacts.C.{}","deliver_subject":"_INBOX.alice.zz","ack_policy":"none"}}}}"#, two.nuid)),
    ] {
        match tokio::time::timeout(std::time::Duration::from_secs(3), alice.client.request(subj, body.into())).await {
            Ok(Ok(m)) => show(tag, &m),
            Ok(Err(e)) => println!("{tag}: error {e}"),
            Err(_) => println!("{tag}: timeout"),
        }
    }
    println!("{:?}", alice.errors().await);
}
