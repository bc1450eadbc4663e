//! Webhook triggers: a delivery to `POST /hooks/{name}` reaches the node as a request on
//! `{ns}.a2a.v1.hook.{name}` (forwarded by any HTTP door, which holds no secret: see
//! `messages::hooks`). Every replica of every workflow declaring hook `name` subscribes
//! in one queue group, so one of them takes each delivery. It answers with the HTTP
//! status the door returns:
//!
//! 1. the body's size (413), then the signature over the raw body (401), checked before
//!    anything of the body is read, so an unsigned sender learns nothing else;
//! 2. the body's type and JSON (415, 400);
//! 3. the trigger's condition, input and de-duplication key (`trigger_start::decide`: 422 when
//!    one fails on the delivery, 200 when the condition is false), the input checked
//!    against the schema (422);
//! 4. the start, through the event triggers' start path (`trigger_start::start`): the run id is
//!    derived from the key, so any replica, any retry of the sender, starts one run; a
//!    delivery whose run exists is answered 200 with that run (a duplicate).
//!
//! Nothing of the secret is logged or answered; the secret is read once, when the node
//! starts ([`load`]), and a node whose secret is missing does not start.

use std::sync::Arc;

use futures::StreamExt;
use messages::hooks::{HookAnswer, MAX_BODY};
use messages::subjects;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::definition::{HookSecret, Trigger, Webhook, Workflow};
use crate::shell::callers::start::check_input;
use crate::shell::callers::trigger_start::{decide, execution_of, start, Taken};
use crate::shell::context::Shared;
use crate::shell::error::{Context, Error, Result};
use crate::shell::run::names;
use crate::shell::store::runs;

/// How many deliveries of one hook a replica handles at once.
const AT_ONCE: usize = 16;

/// A webhook trigger ready to take deliveries: its workflow, its trigger, its secret.
pub(in crate::shell) struct Hook {
    workflow: Arc<Workflow>,
    trigger: Trigger,
    secret: HookSecret,
}

impl Hook {
    fn webhook(&self) -> &Webhook {
        // `load` makes a Hook only of a trigger with a webhook.
        self.trigger
            .webhook
            .as_ref()
            .expect("a hook's trigger is a webhook")
    }
}

/// The hooks `workflow` declares, their secrets read: an error (naming the trigger and
/// where its secret is read from, never the secret) when one cannot be read.
pub(in crate::shell) fn load(workflow: &Arc<Workflow>) -> Result<Vec<Hook>> {
    let mut hooks = Vec::new();
    for trigger in &workflow.triggers {
        let Some(webhook) = &trigger.webhook else {
            continue;
        };
        let secret = HookSecret::load(&webhook.secret).map_err(|why| Error::Setup {
            resource: format!(
                "the secret of webhook {} of {}",
                trigger.name, workflow.name
            ),
            source: why.into(),
        })?;
        hooks.push(Hook {
            workflow: workflow.clone(),
            trigger: trigger.clone(),
            secret,
        });
    }
    Ok(hooks)
}

/// Subscribes to the deliveries of `hook` (in the queue group of its name).
pub(in crate::shell) async fn subscribe(
    shared: &Shared,
    hook: &Hook,
) -> Result<async_nats::Subscriber> {
    let subject = subjects::hook(&shared.ns, &hook.trigger.name);
    shared
        .client
        .queue_subscribe(subject.clone(), format!("hook.{}", hook.trigger.name))
        .await
        .context(|| format!("subscribing to {subject}"))
}

/// Answers the deliveries of `hook` until the subscription ends.
pub(in crate::shell) async fn serve(shared: Arc<Shared>, hook: Hook, sub: async_nats::Subscriber) {
    let hook = Arc::new(hook);
    sub.for_each_concurrent(AT_ONCE, |msg| {
        let (shared, hook) = (shared.clone(), hook.clone());
        async move {
            let Some(reply) = msg.reply.clone() else {
                return;
            };
            let answer = take(&shared, &hook, &msg).await;
            let bytes = serde_json::to_vec(&answer).unwrap_or_default();
            if let Err(e) = shared.client.publish(reply, bytes.into()).await {
                tracing::debug!(hook = %hook.trigger.name, "answering a delivery: {e}");
            }
        }
    })
    .await;
}

/// The answer to one delivery.
async fn take(shared: &Shared, hook: &Hook, msg: &async_nats::Message) -> HookAnswer {
    let headers = headers_of(msg);
    let now_s = crate::shell::clock::now().0 / 1000;
    let (task, input) = match judge(hook, &headers, &msg.payload, now_s) {
        Ok(Some(start)) => start,
        Ok(None) => {
            let mut answer = HookAnswer::refused(
                200,
                "the trigger's condition is false for this delivery: no run started",
            );
            answer.workflow = Some(hook.workflow.name.clone());
            return answer;
        }
        Err(answer) => return answer,
    };
    let (workflow, trigger) = (&hook.workflow, &hook.trigger);
    let execution = execution_of(workflow, trigger, &task);
    let started = match runs::read_record(shared, &names::run_key(&workflow.name, &execution)).await
    {
        Ok(Some(_)) => Ok((false, execution)),
        Ok(None) => start(shared, workflow, trigger, &task, input).await,
        Err(e) => Err(e),
    };
    match started {
        Ok((stored, execution)) => HookAnswer {
            status: if stored { 202 } else { 200 },
            workflow: Some(workflow.name.clone()),
            run_id: Some(execution.0),
            duplicate: !stored,
            error: None,
        },
        Err(e) => {
            tracing::warn!(hook = %trigger.name, "a delivery's run could not be started: {e}");
            HookAnswer::refused(503, format!("the run could not be started: {e}"))
        }
    }
}

/// The delivery's headers (lower-case name → first value).
fn headers_of(msg: &async_nats::Message) -> Map<String, Value> {
    let mut headers = Map::new();
    for (name, values) in msg.headers.iter().flat_map(|h| h.iter()) {
        if let Some(v) = values.first() {
            let name = name.to_string().to_ascii_lowercase();
            headers.insert(name, Value::String(v.as_str().to_string()));
        }
    }
    headers
}

/// What a delivery comes to, decided without I/O: the de-duplication key and the input of
/// the run to start, nothing (the condition is false), or the refusal to answer.
fn judge(
    hook: &Hook,
    headers: &Map<String, Value>,
    body: &[u8],
    now_s: u64,
) -> std::result::Result<Option<(String, Value)>, HookAnswer> {
    if body.len() > MAX_BODY {
        let why = format!("the body is larger than {MAX_BODY} bytes");
        return Err(HookAnswer::refused(413, why));
    }
    let webhook = hook.webhook();
    let signature = headers.get(webhook.scheme.header()).and_then(Value::as_str);
    if let Err(why) = webhook.verify(&hook.secret, signature, body, now_s) {
        return Err(HookAnswer::refused(401, why.to_string()));
    }
    let content_type = headers.get("content-type").and_then(Value::as_str);
    if !content_type.is_some_and(is_json_type) {
        let why = "the body must be JSON (Content-Type: application/json)";
        return Err(HookAnswer::refused(415, why));
    }
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| HookAnswer::refused(400, format!("the body is not JSON: {e}")))?;
    let scope = Trigger::hook_scope(payload, headers.clone());
    let body_key = hex::encode(Sha256::digest(body));
    match decide(&hook.trigger, &scope, &body_key) {
        Taken::Ignored => Ok(None),
        Taken::Poison(why) => Err(HookAnswer::refused(422, why)),
        Taken::Start { task, input } => match check_input(&hook.workflow, &input) {
            Ok(()) => Ok(Some((task, input))),
            Err(why) => Err(HookAnswer::refused(422, why)),
        },
        // The definition refuses `signal` on a webhook: kept apart all the same.
        Taken::Signal { .. } => Err(HookAnswer::refused(
            422,
            "this hook routes signals, which webhooks do not do",
        )),
    }
}

/// Whether a `Content-Type` names JSON (`application/json`, or a `+json` type), with any
/// parameters.
fn is_json_type(value: &str) -> bool {
    let media = value.split(';').next().unwrap_or("").trim();
    let media = media.to_ascii_lowercase();
    media == "application/json" || (media.starts_with("application/") && media.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};

    fn hook(fields: &str) -> Hook {
        let text = format!(
            "name: T\nworkflow:\n  description: d\n  input_schema: {{type: object, required: [id], properties: {{id: {{type: string}}}}}}\n  triggers:\n    - {{name: gh, webhook: github, secret_env: S, {fields}}}\n  nodes:\n    - {{id: a, type: agent, agent_name: A}}\n  output_mapping: {{a: \"{{{{a.output}}}}\"}}\n"
        );
        let wf = Arc::new(crate::definition::parse_str(&text, "t.yaml").unwrap());
        Hook {
            trigger: wf.triggers[0].clone(),
            workflow: wf,
            secret: HookSecret::from_bytes(b"s3cret"),
        }
    }

    fn signed(body: &str, content_type: &str) -> Map<String, Value> {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body.as_bytes());
        let sig = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let mut h = Map::new();
        h.insert("x-hub-signature-256".into(), Value::String(sig));
        h.insert("content-type".into(), Value::String(content_type.into()));
        h.insert("x-github-delivery".into(), Value::String("d-1".into()));
        h
    }

    fn status(r: std::result::Result<Option<(String, Value)>, HookAnswer>) -> u16 {
        match r {
            Ok(Some(_)) => 202,
            Ok(None) => 200,
            Err(a) => a.status,
        }
    }

    #[test]
    fn each_delivery_gets_its_status() {
        let h = hook("condition: '{{event.payload.n}} > 1', input: {id: '{{event.payload.id}}'}, dedup_key: '{{event.headers.x-github-delivery}}'");
        let ok = r#"{"n": 2, "id": "x"}"#;
        let json = "application/json; charset=utf-8";
        let start = judge(&h, &signed(ok, json), ok.as_bytes(), 0).unwrap();
        assert_eq!(start, Some(("d-1".into(), serde_json::json!({"id": "x"}))));
        let low = r#"{"n": 1, "id": "x"}"#;
        assert_eq!(
            status(judge(&h, &signed(low, json), low.as_bytes(), 0)),
            200
        );
        // Signed for another body, or not signed at all: 401, before the type is looked at.
        let other = signed("{}", "text/plain");
        assert_eq!(status(judge(&h, &other, ok.as_bytes(), 0)), 401);
        assert_eq!(status(judge(&h, &Map::new(), ok.as_bytes(), 0)), 401);
        let form = "payload=1";
        let as_form = signed(form, "application/x-www-form-urlencoded");
        assert_eq!(status(judge(&h, &as_form, form.as_bytes(), 0)), 415);
        let broken = "{\"n\": ";
        assert_eq!(
            status(judge(&h, &signed(broken, json), broken.as_bytes(), 0)),
            400
        );
        // The condition fails on a text `n`; the schema refuses an input without `id`.
        let text = r#"{"n": "many"}"#;
        let failed = judge(&h, &signed(text, json), text.as_bytes(), 0).unwrap_err();
        assert_eq!(failed.status, 422);
        assert!(failed.error.unwrap().contains("condition"));
        let no_id = r#"{"n": 2}"#;
        assert_eq!(
            status(judge(&h, &signed(no_id, json), no_id.as_bytes(), 0)),
            422
        );
        let big = format!("\"{}\"", "x".repeat(MAX_BODY));
        assert_eq!(
            status(judge(&h, &signed(&big, json), big.as_bytes(), 0)),
            413
        );
    }

    #[test]
    fn without_a_key_the_body_is_the_key() {
        let h = hook("input: {id: '{{event.payload.id}}'}");
        let body = r#"{"id": "x"}"#;
        let json = "application/vnd.github+json";
        let (task, _) = judge(&h, &signed(body, json), body.as_bytes(), 0)
            .unwrap()
            .unwrap();
        assert_eq!(task, hex::encode(Sha256::digest(body.as_bytes())));
    }
}
