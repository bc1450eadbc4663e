//! Push notifications of the A2A door: configs set on a workflow's task, kept in
//! JetStream beside its run, and the POST each gets when the task reaches
//! `input-required` or a final state (`docs/a2a.md`, "Push notifications").
//!
//! A config is kept in the KV bucket `{ns}_a2a_push` under `cfg.{execution}.{id}` (the
//! run's execution id: unique across workflows), with the task, workflow and version it
//! was set in: every door process (any replica of `serve --http` or `ui`) reads them, and
//! they outlive a restart, until the runs' retention (the bucket's `max_age`). Only a
//! workflow's task takes one: an agent's task lives only with the replica running it.
//! Sending is [`deliver`]'s: once per config and state, whichever replica claims it.

pub(super) mod deliver;
pub(crate) mod guard;

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::rpc::{PushConfig, PushOp, RpcError, Version};
use crate::ops::call::Callee;
use crate::ops::runs::RunRef;
use crate::web::Ctx;
use messages::jsonrpc::codes;

/// At most this many configs per task.
const MAX_PER_TASK: usize = 8;
/// How long configs are kept: the default run retention.
const KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A config as kept: the client's, with the task it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Stored {
    /// The task id the client knows.
    pub(super) task_id: String,
    /// The task's context.
    pub(super) context_id: String,
    /// The workflow.
    pub(super) workflow: String,
    /// The run.
    pub(super) execution: String,
    /// The version the config was set in: the notification's body is written in it.
    pub(super) version: String,
    /// The config (its id always set).
    pub(super) config: PushConfig,
}

/// The bucket's name in namespace `ns`.
pub(super) fn bucket_name(ns: &str) -> String {
    format!("{}_a2a_push", ns.replace('.', "_"))
}

/// Finds or makes the bucket, with as many replicas as the runs bucket has.
pub(super) async fn bucket(client: &async_nats::Client, ns: &str) -> Result<kv::Store, String> {
    let js = jetstream::new(client.clone());
    let name = bucket_name(ns);
    if let Ok(store) = js.get_key_value(&name).await {
        return Ok(store);
    }
    let runs = crate::shell::run::names::runs_bucket(ns);
    let replicas = match js.get_key_value(&runs).await {
        Ok(store) => {
            let mut stream = store.stream.clone();
            stream
                .info()
                .await
                .map(|i| i.config.num_replicas)
                .unwrap_or(1)
        }
        Err(_) => 1,
    };
    let config = kv::Config {
        bucket: name.clone(),
        history: 1,
        max_age: KEPT,
        num_replicas: replicas,
        max_bytes: 64 << 20,
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        // Another node made it in between; if not, the refusal is the cause.
        Err(refused) => js
            .get_key_value(&name)
            .await
            .map_err(|_| format!("making the push configs' bucket {name}: {refused}")),
    }
}

fn internal(id: &Value, e: impl std::fmt::Display) -> RpcError {
    RpcError::new(id, codes::INTERNAL_ERROR, e.to_string())
}

/// The run of task `task` of `callee`: its execution id and context; -32001 when none,
/// -32003 for an agent.
async fn run_of(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    task: &str,
) -> Result<(String, String, String), RpcError> {
    let Callee::Workflow(workflow) = callee else {
        return Err(RpcError::new(
            id,
            codes::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "an agent's task lives only with the replica running it: push notifications are \
             served for workflows' tasks",
        ));
    };
    let runs = ctx.runs().await.map_err(|e| internal(id, e.message))?;
    let which = RunRef {
        id: task,
        workflow: Some(workflow),
        caller: None,
    };
    let run = runs
        .find_soon(which, super::tasks::JUST_STARTED)
        .await
        .map_err(|r| super::tasks::rpc_error(id, &r))?;
    let context = run
        .record
        .caller
        .context_id
        .clone()
        .unwrap_or(run.execution.0.clone());
    Ok((workflow.clone(), run.execution.0, context))
}

/// The configs kept for run `execution`, by key.
async fn configs(store: &kv::Store, execution: &str) -> Result<Vec<Stored>, String> {
    let mut keys = store.keys().await.map_err(|e| e.to_string())?;
    let prefix = format!("cfg.{execution}.");
    let mut out = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| e.to_string())?;
        if !key.starts_with(&prefix) {
            continue;
        }
        if let Some(bytes) = store.get(&key).await.map_err(|e| e.to_string())? {
            if let Ok(s) = serde_json::from_slice::<Stored>(&bytes) {
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// Keeps `config` for task `task` (checked: its URL, the addresses it names, the bounds).
pub(super) async fn set(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    version: Version,
    task: &str,
    mut config: PushConfig,
) -> Result<Value, RpcError> {
    let invalid = |m: String| RpcError::new(id, codes::INVALID_PARAMS, m);
    let url = guard::parse(&config.url).map_err(invalid)?;
    guard::resolve(&url, ctx.access.push_allows_private())
        .await
        .map_err(invalid)?;
    for value in [&config.token, &config.credentials].into_iter().flatten() {
        if axum::http::HeaderValue::from_str(value).is_err() {
            return Err(invalid(
                "a token or credentials must be visible ASCII".into(),
            ));
        }
    }
    let (workflow, execution, context_id) = run_of(ctx, callee, id, task).await?;
    let store = bucket(&ctx.client, &ctx.ns)
        .await
        .map_err(|e| internal(id, e))?;
    let kept = configs(&store, &execution)
        .await
        .map_err(|e| internal(id, e))?;
    let config_id = config
        .id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if kept.len() >= MAX_PER_TASK
        && !kept
            .iter()
            .any(|k| k.config.id.as_deref() == Some(&config_id))
    {
        return Err(invalid(format!(
            "a task takes at most {MAX_PER_TASK} push configs"
        )));
    }
    config.id = Some(config_id.clone());
    let stored = Stored {
        task_id: task.to_owned(),
        context_id,
        workflow,
        execution: execution.clone(),
        version: match version {
            Version::V03 => "0.3".into(),
            Version::V10 => "1.0".into(),
        },
        config,
    };
    let bytes = serde_json::to_vec(&stored).map_err(|e| internal(id, e))?;
    store
        .put(format!("cfg.{execution}.{config_id}"), bytes.into())
        .await
        .map_err(|e| internal(id, e))?;
    Ok(written(&stored, version))
}

/// A kept config as `version` writes a `TaskPushNotificationConfig`.
fn written(s: &Stored, version: Version) -> Value {
    let c = &s.config;
    match version {
        Version::V03 => {
            let mut config = json!({"id": c.id, "url": c.url});
            if let Some(t) = &c.token {
                config["token"] = json!(t);
            }
            if let Some(scheme) = &c.scheme {
                config["authentication"] =
                    json!({"schemes": [scheme], "credentials": c.credentials});
            }
            json!({"taskId": s.task_id, "pushNotificationConfig": config})
        }
        Version::V10 => {
            let mut config = json!({"taskId": s.task_id, "id": c.id, "url": c.url});
            if let Some(t) = &c.token {
                config["token"] = json!(t);
            }
            if let Some(scheme) = &c.scheme {
                config["authentication"] = json!({"scheme": scheme, "credentials": c.credentials});
            }
            config
        }
    }
}

/// Answers a push-notification config operation.
pub(super) async fn serve(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    version: Version,
    op: PushOp,
) -> Result<Value, RpcError> {
    match op {
        PushOp::Set { task, config } => set(ctx, callee, id, version, &task, config).await,
        PushOp::Get { task, id: want } => {
            let (_, kept) = kept(ctx, callee, id, &task).await?;
            Ok(written(&named(&kept, want.as_deref(), id, &task)?, version))
        }
        PushOp::List { task } => {
            let (_, kept) = kept(ctx, callee, id, &task).await?;
            let all: Vec<Value> = kept.iter().map(|k| written(k, version)).collect();
            Ok(match version {
                Version::V03 => Value::Array(all),
                Version::V10 => json!({"configs": all, "nextPageToken": ""}),
            })
        }
        PushOp::Delete { task, id: want } => {
            let (store, kept) = kept(ctx, callee, id, &task).await?;
            let found = named(&kept, Some(&want), id, &task)?;
            let config_id = found.config.id.unwrap_or_default();
            let key = format!("cfg.{}.{config_id}", found.execution);
            store.delete(key).await.map_err(|e| internal(id, e))?;
            Ok(match version {
                Version::V03 => Value::Null,
                Version::V10 => json!({}),
            })
        }
    }
}

/// The bucket, and the configs kept for task `task` of `callee`.
async fn kept(
    ctx: &Ctx,
    callee: &Callee,
    id: &Value,
    task: &str,
) -> Result<(kv::Store, Vec<Stored>), RpcError> {
    let (_, execution, _) = run_of(ctx, callee, id, task).await?;
    let store = bucket(&ctx.client, &ctx.ns)
        .await
        .map_err(|e| internal(id, e))?;
    let kept = configs(&store, &execution)
        .await
        .map_err(|e| internal(id, e))?;
    Ok((store, kept))
}

/// The config `want` names among `kept` (the first when no id is given); -32001 if none.
fn named(kept: &[Stored], want: Option<&str>, id: &Value, task: &str) -> Result<Stored, RpcError> {
    kept.iter()
        .find(|k| want.is_none() || k.config.id.as_deref() == want)
        .cloned()
        .ok_or_else(|| {
            RpcError::new(
                id,
                codes::TASK_NOT_FOUND,
                format!("task {task} has no such push config"),
            )
        })
}
