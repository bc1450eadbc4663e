//! Proves the test harness with the real client: JetStream KV with compare-and-swap,
//! per-key TTLs (nats-server ≥ 2.11), several servers at once, restart, clean-up on drop,
//! and a 3-node cluster surviving the loss of a node.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use async_nats::jetstream::{self, kv, stream};
use test_harness::{cluster, nats, nats_with, Options};

/// Retries `op` up to `attempts` times, pausing `pause` between tries; for conditions that
/// become true after an election or a reconnect. Returns the last error.
async fn retry<T, F, Fut>(attempts: usize, pause: Duration, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut last = None;
    for _ in 0..attempts {
        match op().await {
            Ok(value) => return Ok(value),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(pause).await;
    }
    Err(last
        .expect("attempts > 0")
        .context(format!("still failing after {attempts} attempts")))
}

#[tokio::test]
async fn kv_compare_and_swap_rejects_a_stale_revision() -> Result<()> {
    let server = nats();
    let js = jetstream::new(async_nats::connect(server.url()).await?);
    let kv = js
        .create_key_value(kv::Config {
            bucket: "runs".into(),
            history: 5,
            ..Default::default()
        })
        .await?;

    let first = kv.create("run-1", "a".into()).await?;
    assert!(kv.create("run-1", "again".into()).await.is_err());
    let second = kv.update("run-1", "b".into(), first).await?;
    assert!(second > first);

    let stale = kv.update("run-1", "c".into(), first).await.unwrap_err();
    assert_eq!(stale.kind(), kv::UpdateErrorKind::WrongLastRevision);
    let entry = kv.entry("run-1").await?.context("entry missing")?;
    assert_eq!((entry.value.as_ref(), entry.revision), (&b"b"[..], second));
    Ok(())
}

#[tokio::test]
async fn per_key_ttl_is_supported() -> Result<()> {
    let server = nats();
    let client = async_nats::connect(server.url()).await?;
    let version = client.server_info().version;
    let js = jetstream::new(client);
    let kv = js
        .create_key_value(kv::Config {
            bucket: "timers".into(),
            limit_markers: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .await
        .with_context(|| format!("limit_markers on nats-server {version}"))?;
    kv.create_with_ttl("deadline", "x".into(), Duration::from_secs(60))
        .await?;
    assert!(kv.get("deadline").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn two_servers_run_side_by_side() -> Result<()> {
    let (a, b) = (nats(), nats());
    assert_ne!(a.port(), b.port());
    assert_ne!(a.store_dir(), b.store_dir());
    let (ca, cb) = (
        async_nats::connect(a.url()).await?,
        async_nats::connect(b.url()).await?,
    );
    // The same stream name on each server: they share nothing.
    for (client, n) in [(&ca, 1), (&cb, 2)] {
        let js = jetstream::new(client.clone());
        let s = js
            .create_stream(stream::Config {
                name: "EVENTS".into(),
                subjects: vec!["events.>".into()],
                ..Default::default()
            })
            .await?;
        for _ in 0..n {
            js.publish("events.x", "e".into()).await?.await?;
        }
        drop(s);
    }
    for (client, n) in [(&ca, 1), (&cb, 2)] {
        let mut s = jetstream::new(client.clone()).get_stream("EVENTS").await?;
        assert_eq!(s.info().await?.state.messages, n);
    }
    Ok(())
}

#[tokio::test]
async fn restart_keeps_stream_data_and_clients_reconnect() -> Result<()> {
    let mut server = nats();
    let port = server.port();
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let client = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(event);
            }
        })
        .connect(server.url())
        .await?;
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "EVENTS".into(),
        subjects: vec!["events.>".into()],
        ..Default::default()
    })
    .await?;
    for i in 0..3 {
        js.publish(format!("events.{i}"), "e".into()).await?.await?;
    }

    server.restart()?;
    assert_eq!(server.port(), port);

    // The same client notices the restart and reconnects by itself. Asking before it has
    // would send the request into the dead connection and wait out its timeout.
    let reconnected = tokio::time::timeout(Duration::from_secs(10), async {
        let mut disconnected = false;
        while let Some(event) = events.recv().await {
            match event {
                async_nats::Event::Disconnected => disconnected = true,
                async_nats::Event::Connected if disconnected => return true,
                _ => {}
            }
        }
        false
    })
    .await
    .context("no reconnect within 10 s")?;
    assert!(reconnected);

    let mut s = js.get_stream("EVENTS").await?;
    assert_eq!(s.info().await?.state.messages, 3);
    Ok(())
}

#[tokio::test]
async fn kill_and_drop_remove_the_temp_dir() -> Result<()> {
    let mut server = nats();
    let dir = server.dir().to_owned();
    assert!(server.store_dir().starts_with(&dir));
    assert!(server.is_running());
    server.kill()?;
    assert!(!server.is_running());
    assert!(dir.exists());
    drop(server);
    assert!(!dir.exists(), "{} was left behind", dir.display());

    // A caller's data dir is kept.
    let keep = tempfile::tempdir()?;
    let server = nats_with(Options {
        data_dir: Some(keep.path().to_owned()),
        ..Options::default()
    });
    let store = server.store_dir();
    drop(server);
    assert!(store.exists());
    Ok(())
}

#[tokio::test]
async fn cluster_keeps_an_r3_bucket_writable_when_a_node_stops() -> Result<()> {
    let mut cluster = cluster();
    let urls = cluster.urls();
    // Connected to the node that stays up, and knowing the others for failover.
    let client = async_nats::ConnectOptions::new()
        .request_timeout(Some(Duration::from_secs(2)))
        .connect(vec![urls[2].clone(), urls[1].clone()])
        .await?;
    let js = jetstream::new(client);
    let kv = retry(20, Duration::from_millis(200), || async {
        Ok(js
            .create_key_value(kv::Config {
                bucket: "runs".into(),
                num_replicas: 3,
                ..Default::default()
            })
            .await?)
    })
    .await?;
    let mut revision = kv.create("run-1", "0".into()).await?;

    cluster.stop_node(0)?;
    for i in 1..=3 {
        // The bucket's stream may have to elect a new leader: retry, bounded.
        revision = retry(30, Duration::from_millis(200), || {
            let kv = kv.clone();
            async move { Ok(kv.update("run-1", i.to_string().into(), revision).await?) }
        })
        .await?;
    }

    cluster.start_node(0)?;
    let js0 = jetstream::new(async_nats::connect(cluster.node(0).url()).await?);
    let value = retry(50, Duration::from_millis(200), || async {
        let kv0 = js0.get_key_value("runs").await?;
        let entry = kv0.entry("run-1").await?.context("no entry")?;
        if entry.revision != revision {
            bail!("node 0 has revision {}, want {revision}", entry.revision);
        }
        Ok(entry.value)
    })
    .await?;
    assert_eq!(value.as_ref(), b"3");
    Ok(())
}

/// The number of routes server `node` has, from its `/routez`.
fn routes_of(cluster: &test_harness::Cluster, node: usize) -> Result<u64> {
    let body = cluster.node(node).monitor("/routez")?;
    let json: serde_json::Value = serde_json::from_str(&body)?;
    json["num_routes"].as_u64().context("no num_routes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_cut_from_the_others_has_no_quorum_and_catches_up_once_healed() -> Result<()> {
    let cluster = test_harness::partition::Partitionable::start(3).await?;
    let urls = cluster.urls();
    let timeout = |url: String| async move {
        async_nats::ConnectOptions::new()
            .request_timeout(Some(Duration::from_secs(1)))
            .connect(url)
            .await
    };
    let js0 = jetstream::new(timeout(urls[0].clone()).await?);
    let js2 = jetstream::new(timeout(urls[2].clone()).await?);
    let kv0 = retry(20, Duration::from_millis(200), || async {
        Ok(js0
            .create_key_value(kv::Config {
                bucket: "runs".into(),
                num_replicas: 3,
                ..Default::default()
            })
            .await?)
    })
    .await?;
    kv0.put("before", "1".into()).await?;
    assert!(
        routes_of(cluster.cluster(), 2)? > 0,
        "routes before the cut"
    );

    cluster.isolate(2);
    // Every route of server 2 went through the proxies: none is left.
    retry(50, Duration::from_millis(100), || async {
        match routes_of(cluster.cluster(), 2)? {
            0 => Ok(()),
            n => bail!("server 2 still has {n} routes"),
        }
    })
    .await?;
    cluster.wait_leader_among(&[0, 1]).await?;
    // The majority side goes on; the minority's client cannot write. The meta leader agreed
    // on says nothing of the bucket's own leader: if it was server 2, the bucket's group
    // elects another only after its election timeout (seconds, longer on a loaded machine),
    // and until then a publish finds "no stream". Bounded at 30 s.
    retry(150, Duration::from_millis(200), || async {
        Ok(kv0.put("during", "2".into()).await?)
    })
    .await?;
    let kv2 = js2.get_key_value("runs").await;
    let written = match kv2 {
        Ok(kv2) => kv2
            .put("stranded", "3".into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(written.is_err(), "a write on the cut server was accepted");

    cluster.heal();
    cluster.wait_leader_among(&[0, 1, 2]).await?;
    // Server 2 catches up once its routes are back and it has heard from the leader.
    let value = retry(150, Duration::from_millis(200), || async {
        let kv2 = js2.get_key_value("runs").await?;
        kv2.get("during").await?.context("not there yet")
    })
    .await?;
    assert_eq!(value.as_ref(), b"2");
    Ok(())
}

#[test]
fn a_server_that_cannot_start_reports_why() {
    let err = test_harness::NatsServer::start(Options {
        extra_config: Some("jetstream: { unknown_option_xyz: 1 }".into()),
        ..Options::default()
    })
    .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("did not start"), "{message}");
    assert!(message.contains("unknown_option_xyz"), "{message}");
}
