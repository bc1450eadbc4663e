//! The serving loop of one agent: subscriptions, card publishing, cancel routing, and one
//! tokio task per call (decode → load input → validate → handler → validate → reply).
//!
//! Requests and cancels are read by the same loop, and a call is registered as running
//! before its task is spawned, so a cancel that follows its request on the wire always
//! finds it, and so does a copy of the request (same task id): it never runs the handler
//! a second time (see `dedup`). A call stops running and its outcome is remembered before
//! its answers are published, so a copy arriving in between is answered from memory.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_nats::{Client, HeaderMap, Message};
use bytes::Bytes;
use futures::StreamExt;
use messages::jsonrpc::codes;
use messages::{call_proof, subjects};
use messages::{AgentReply, ErrorObject, Response, Task, TaskState, TaskStatus};
use serde_json::Value;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::agent::{AgentBuilder, AgentHandle};
use crate::artifacts::ArtifactStore;
use crate::dedup::{Admission, Calls};
use crate::error::ServeError;
use crate::handler::{DynHandler, NodeRequest, StatusSink};
use crate::pings::PingGate;
use crate::protocol::{
    self, Call, Decoded, InputSource, Outcome, Output, KIND_INPUT_VALIDATION,
    KIND_OUTPUT_VALIDATION,
};
use crate::schema::Schema;

/// Everything a call task needs, shared.
struct Shared {
    name: String,
    /// The namespace: replies go only to inboxes and its response and status subjects.
    ns: String,
    client: Client,
    handler: Arc<dyn DynHandler>,
    input_schema: Option<Schema>,
    output_schema: Option<Schema>,
    artifacts: ArtifactStore,
    artifact_threshold: usize,
    permits: Arc<Semaphore>,
    heartbeat_interval: std::time::Duration,
    calls: Mutex<Calls>,
}

impl Shared {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        // The table stays consistent even if a holder panicked: every update is one call.
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a reply or status update, unless `subject` is one a requester may not make
    /// an agent publish to (a system subject, a workflow's internal events: see
    /// [`subjects::check_reply`]); that is refused with a warning, nothing published.
    ///
    /// A reply or status update of a call made with a token (`Some`) is proven with it: its
    /// `Mesh-Call-Mac` covers the subject and the bytes published.
    async fn publish(
        &self,
        subject: &str,
        mut headers: HeaderMap,
        response: &Response,
        token: Option<&str>,
    ) {
        if let Err(e) = subjects::check_reply(&self.ns, subject) {
            tracing::warn!(agent = %self.name, "not answering: {e}");
            return;
        }
        let bytes = match serde_json::to_vec(response) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(agent = %self.name, "cannot serialise a reply: {e}");
                return;
            }
        };
        if let Some(token) = token {
            let mac = call_proof::mac(token, subject, &bytes);
            headers.insert(call_proof::CALL_MAC, mac.as_str());
        }
        if let Err(e) = self
            .client
            .publish_with_headers(subject.to_owned(), headers, Bytes::from(bytes))
            .await
        {
            tracing::warn!(agent = %self.name, subject, "cannot publish a reply: {e}");
        }
    }
}

/// Starts serving `builder` on `client` (see [`AgentBuilder::serve`]).
pub(crate) async fn start(
    builder: AgentBuilder,
    client: Client,
) -> Result<AgentHandle, ServeError> {
    let (input_schema, output_schema) = builder.check()?;
    let name = builder.name.clone();
    let ns = builder.namespace.clone();
    let handler = builder
        .handler
        .clone()
        .ok_or_else(|| ServeError::NoHandler(name.clone()))?;
    let sub_err = |subject: &str, e: &dyn std::fmt::Display| ServeError::Subscribe {
        agent: name.clone(),
        subject: subject.to_owned(),
        reason: e.to_string(),
    };
    let request_subject = subjects::agent_request(&ns, &name);
    let requests = client
        .queue_subscribe(request_subject.clone(), name.clone())
        .await
        .map_err(|e| sub_err(&request_subject, &e))?;
    let cancel_subject = subjects::agent_cancel(&ns, &name);
    let cancels = client
        .subscribe(cancel_subject.clone())
        .await
        .map_err(|e| sub_err(&cancel_subject, &e))?;
    let ping_subject = subjects::discovery_ping(&ns);
    let pings = client
        .subscribe(ping_subject.clone())
        .await
        .map_err(|e| sub_err(&ping_subject, &e))?;
    // Serving starts once the server knows the subscriptions, not once they are written.
    crate::roundtrip::roundtrip(&client)
        .await
        .map_err(|e| sub_err(&request_subject, &e))?;

    let card = Bytes::from(
        serde_json::to_vec(&builder.card()).expect("an agent card always serialises to JSON"),
    );
    let shared = Arc::new(Shared {
        name: name.clone(),
        ns: ns.clone(),
        client: client.clone(),
        handler,
        input_schema,
        output_schema,
        artifacts: ArtifactStore::new(client.clone(), &ns),
        artifact_threshold: builder.artifact_threshold,
        permits: Arc::new(Semaphore::new(builder.max_in_flight)),
        heartbeat_interval: builder.heartbeat_interval,
        calls: Mutex::new(Calls::new(builder.dedup_capacity, builder.dedup_window)),
    });
    let card = CardOut {
        subject: subjects::agent_cards(&ns),
        name: name.clone(),
        bytes: card,
        signer: builder.signer.clone(),
    };
    card.publish(&client).await;

    let (stop_tx, stop_rx) = oneshot::channel();
    let serving = Serving {
        shared,
        card,
        card_interval: builder.card_interval,
    };
    let task = tokio::spawn(serving.run(requests, cancels, pings, stop_rx));
    tracing::info!(agent = %name, subject = %request_subject, "agent serving");
    Ok(AgentHandle {
        name,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// The agent's card as it goes out: each copy signed afresh when the agent has a key.
struct CardOut {
    subject: String,
    name: String,
    bytes: Bytes,
    signer: Option<crate::Signer>,
}

impl CardOut {
    async fn publish(&self, client: &Client) {
        let headers = match &self.signer {
            Some(signer) => crate::card_trust::sign_card(
                signer,
                &self.name,
                &self.bytes,
                std::time::SystemTime::now(),
            ),
            None => HeaderMap::new(),
        };
        let subject = self.subject.clone();
        if let Err(e) = client
            .publish_with_headers(subject, headers, self.bytes.clone())
            .await
        {
            tracing::warn!(subject = %self.subject, "cannot publish the agent card: {e}");
        }
    }
}

struct Serving {
    shared: Arc<Shared>,
    card: CardOut,
    card_interval: std::time::Duration,
}

impl Serving {
    async fn run(
        self,
        mut requests: async_nats::Subscriber,
        mut cancels: async_nats::Subscriber,
        mut pings: async_nats::Subscriber,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut calls = JoinSet::new();
        let start = tokio::time::Instant::now() + self.card_interval;
        let mut ticker = tokio::time::interval_at(start, self.card_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gate = PingGate::default();
        loop {
            let owed = gate.due();
            let owed_at =
                tokio::time::Instant::from_std(owed.unwrap_or_else(std::time::Instant::now));
            tokio::select! {
                biased;
                _ = &mut stop => break,
                // Requests before cancels: a cancel that arrived after its request is then
                // always seen after the request was registered.
                msg = requests.next() => match msg {
                    Some(msg) => self.on_request(msg, &mut calls).await,
                    None => break,
                },
                msg = cancels.next() => match msg {
                    Some(msg) => self.on_cancel(msg).await,
                    None => break,
                },
                Some(_) = pings.next() => {
                    if gate.ping(std::time::Instant::now()) {
                        self.publish_card(&mut gate).await;
                    }
                }
                _ = tokio::time::sleep_until(owed_at), if owed.is_some() => {
                    self.publish_card(&mut gate).await;
                }
                _ = ticker.tick() => self.card.publish(&self.shared.client).await,
                Some(done) = calls.join_next(), if !calls.is_empty() => {
                    if let Err(e) = done {
                        tracing::error!(agent = %self.shared.name, "call task failed: {e}");
                    }
                }
            }
        }
        self.drain(requests, cancels, pings, calls).await;
        tracing::info!(agent = %self.shared.name, "agent stopped");
    }

    /// Stops taking requests and answers every one it took: the requests subscription is
    /// drained (the server sends no more once it has the unsubscribe, so queue-group peers
    /// take new requests), and the requests it had already delivered, some still waiting
    /// in the subscription's buffer, are handled like any other. Running calls then
    /// answer (cancels still reach them), and the answers are made sure to be at the
    /// server before this returns: a process that exits next loses none.
    async fn drain(
        &self,
        mut requests: async_nats::Subscriber,
        mut cancels: async_nats::Subscriber,
        pings: async_nats::Subscriber,
        mut calls: JoinSet<()>,
    ) {
        drop(pings);
        let mut taking = match requests.drain().await {
            Ok(()) => true,
            Err(e) => {
                // The connection is gone: nothing more can come in.
                tracing::warn!(agent = %self.shared.name, "cannot drain the requests subscription: {e}");
                false
            }
        };
        while taking || !calls.is_empty() {
            tokio::select! {
                biased;
                msg = requests.next(), if taking => match msg {
                    Some(msg) => self.on_request(msg, &mut calls).await,
                    None => taking = false,
                },
                Some(msg) = cancels.next() => self.on_cancel(msg).await,
                Some(done) = calls.join_next(), if !calls.is_empty() => {
                    if let Err(e) = done {
                        tracing::error!(agent = %self.shared.name, "call task failed: {e}");
                    }
                }
            }
        }
        drop((requests, cancels));
        // Publishing only hands a message to the connection's task; a round trip proves
        // the server has every answer sent before it.
        if let Err(e) = crate::roundtrip::roundtrip(&self.shared.client).await {
            tracing::warn!(agent = %self.shared.name, "answers may not have reached the server: {e}");
        }
    }

    /// Publishes the card in answer to pings, telling `gate` (pings within its gap wait for
    /// its end).
    async fn publish_card(&self, gate: &mut PingGate) {
        self.card.publish(&self.shared.client).await;
        gate.published(std::time::Instant::now());
    }

    async fn on_request(&self, msg: Message, calls: &mut JoinSet<()>) {
        let reply = msg.reply.as_ref().map(|s| s.as_str());
        if let Err((refusal, to)) = protocol::screen(&self.shared.ns, msg.headers.as_ref(), reply) {
            tracing::warn!(agent = %self.shared.name, "refusing a request: {refusal}");
            if let Some(to) = to {
                let id = messages::Request::from_slice(&msg.payload)
                    .ok()
                    .map(|r| r.id);
                let e = ErrorObject::new(codes::INVALID_PARAMS, refusal);
                self.shared
                    .publish(to, HeaderMap::new(), &Response::error(id, e), None)
                    .await;
            }
            return;
        }
        match protocol::decode(&msg.payload, msg.headers.as_ref(), reply) {
            Decoded::Send(call) => self.on_send(*call, calls).await,
            Decoded::Cancel {
                id,
                task_id,
                reply_to,
            } => {
                let found = self.shared.calls().cancel(&task_id, proven_by(&msg));
                if let Some(to) = reply_to {
                    let response = cancel_answer(id, &task_id, found);
                    let headers = protocol::reply_headers("", msg.headers.as_ref());
                    self.shared.publish(&to, headers, &response, None).await;
                }
            }
            Decoded::Get {
                id,
                task_id,
                reply_to,
            } => {
                let known = self.shared.calls().known(&task_id, Instant::now());
                if let Some(to) = reply_to {
                    let response = protocol::get_answer(id, &task_id, known.as_ref());
                    let headers = protocol::reply_headers("", msg.headers.as_ref());
                    self.shared.publish(&to, headers, &response, None).await;
                }
            }
            Decoded::Reject { reply_to, response } => {
                tracing::debug!(agent = %self.shared.name, "rejecting a malformed request");
                match reply_to {
                    Some(to) => {
                        let msg_id = response.id.as_ref().map(|i| i.to_string());
                        let headers = protocol::reply_headers(
                            msg_id.as_deref().unwrap_or(""),
                            msg.headers.as_ref(),
                        );
                        self.shared.publish(&to, headers, &response, None).await;
                    }
                    None => tracing::warn!(
                        agent = %self.shared.name,
                        "malformed request without a reply subject dropped"
                    ),
                }
            }
        }
    }

    /// A `message/send`: run it, or let a copy of a call already running or finished here
    /// share that call's answer (see `dedup`).
    async fn on_send(&self, call: Call, calls: &mut JoinSet<()>) {
        let admission = self.shared.calls().admit(&call, Instant::now());
        let started = match admission {
            Admission::Run { seq, canceled } => {
                let span = handler_span(&self.shared.name, &call);
                calls.spawn(run_call(self.shared.clone(), call, seq, canceled).instrument(span));
                return;
            }
            Admission::Answered(outcome) => {
                tracing::debug!(agent = %self.shared.name, task = %call.task_id, "answering a copy of a finished call");
                answer(&self.shared, &call, &outcome).await;
                return;
            }
            Admission::Joined { started } | Admission::Dropped { started } => started,
        };
        tracing::debug!(agent = %self.shared.name, task = %call.task_id, "a copy of a running call");
        // A sign of life for a caller that resent because it heard nothing.
        let state = if started {
            TaskState::Working
        } else {
            TaskState::Submitted
        };
        send_status(&self.shared, &call, state).await;
    }

    /// A message on the cancel broadcast: only the replica running the task answers.
    async fn on_cancel(&self, msg: Message) {
        let reply = msg.reply.as_ref().map(|s| s.as_str());
        match protocol::decode(&msg.payload, msg.headers.as_ref(), reply) {
            Decoded::Cancel {
                id,
                task_id,
                reply_to,
            } => {
                if self.shared.calls().cancel(&task_id, proven_by(&msg)) {
                    if let Some(to) = reply_to {
                        let response = cancel_answer(id, &task_id, true);
                        let headers = protocol::reply_headers("", msg.headers.as_ref());
                        self.shared.publish(&to, headers, &response, None).await;
                    }
                }
            }
            _ => {
                tracing::debug!(agent = %self.shared.name, "ignoring a non-cancel on the cancel subject")
            }
        }
    }
}

/// Whether a token proves `msg` (a `tasks/cancel`): its `Mesh-Call-Mac` is that token's
/// MAC of its subject and payload.
fn proven_by(msg: &Message) -> impl Fn(&str) -> bool + '_ {
    let mac = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(call_proof::CALL_MAC));
    move |token| {
        mac.is_some_and(|mac| call_proof::verify(token, &msg.subject, &msg.payload, mac.as_str()))
    }
}

/// The answer to a `tasks/cancel` itself: the canceled task, or "task not found".
fn cancel_answer(id: messages::RequestId, task_id: &str, found: bool) -> Response {
    if found {
        Response::result(
            id,
            AgentReply::Task(Task {
                id: task_id.to_owned(),
                context_id: task_id.to_owned(),
                status: TaskStatus::new(TaskState::Canceled),
                artifacts: None,
                metadata: None,
            }),
        )
    } else {
        Response::error(
            Some(id),
            ErrorObject::new(
                codes::TASK_NOT_FOUND,
                format!("task {task_id} is not running here"),
            ),
        )
    }
}

/// The span of one handled request (`agent.handle`), a child of the request's
/// `traceparent`; a disabled span when this process exports no traces, so that nothing
/// costs and the logs read as before.
fn handler_span(agent: &str, call: &Call) -> tracing::Span {
    if !crate::telemetry::active() {
        return tracing::Span::none();
    }
    let w = call.workflow.as_ref();
    let span = tracing::info_span!(
        "agent.handle",
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
        agent.name = agent,
        task.id = call.task_id.as_str(),
        context.id = call.context_id.as_str(),
        workflow.name = w.map(|w| w.workflow_name.as_str()),
        workflow.execution_id = w.map(|w| w.execution_id.as_str()),
        node.id = w.map(|w| w.node_id.as_str()),
        sub_task.id = w.map(|w| w.sub_task_id.as_str()),
        attempt = w.and_then(|w| w.attempt),
        map.index = w.and_then(|w| w.map_index),
        loop.iteration = w.and_then(|w| w.loop_iteration),
        outcome = tracing::field::Empty,
        error.kind = tracing::field::Empty,
    );
    crate::telemetry::set_parent_from(&span, &call.headers);
    span
}

/// Records how a call ended on its handler span.
fn record_outcome(outcome: &Outcome) {
    let span = tracing::Span::current();
    match outcome {
        Outcome::Success(_) => {
            span.record("outcome", "success");
        }
        Outcome::Failure { message, kind, .. } => {
            span.record("outcome", "failure");
            span.record("otel.status_code", "ERROR");
            span.record("otel.status_message", message.as_str());
            if let Some(kind) = kind {
                span.record("error.kind", kind.as_str());
            }
        }
        Outcome::Canceled => {
            span.record("outcome", "canceled");
        }
    }
}

/// Forgets a call whose task ended without an outcome (aborted, or panicked).
struct Registration {
    shared: Arc<Shared>,
    key: String,
    seq: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.calls().abandon(&self.key, self.seq);
    }
}

async fn run_call(shared: Arc<Shared>, call: Call, seq: u64, canceled: oneshot::Receiver<()>) {
    let _registration = Registration {
        shared: shared.clone(),
        key: call.dedup_key(),
        seq,
    };
    let canceled = async move {
        // A dropped sender (the call was forgotten) is not a cancel.
        if canceled.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(canceled);
    let permits = shared.permits.clone();
    let permit = tokio::select! {
        permit = permits.acquire_owned() => permit.ok(),
        _ = &mut canceled => None,
    };
    let outcome = match permit {
        None => Outcome::Canceled,
        Some(_permit) => {
            shared.calls().started(&call.dedup_key(), seq);
            // A sign of life at once, for callers that resend after silence. A workflow's
            // call gets none: the workflow node times its calls out instead of resending,
            // and drops a bare `working` (one message per call saved on its hot path);
            // the heartbeats below still go to it while the handler runs.
            if call.node_request.is_none() {
                send_status(&shared, &call, TaskState::Working).await;
            }
            let work = process(&shared, &call);
            tokio::pin!(work);
            // Signs of life, so a caller that resends after silence does not.
            let every = shared.heartbeat_interval;
            let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    outcome = &mut work => break outcome,
                    _ = &mut canceled => break Outcome::Canceled,
                    _ = beat.tick(), if call.status_to.is_some() => {
                        send_status(&shared, &call, TaskState::Working).await;
                    }
                }
            }
        }
    };
    record_outcome(&outcome);
    // Copies that arrive from here on are answered from memory.
    let waiters = shared
        .calls()
        .finish(&call.dedup_key(), seq, &outcome, Instant::now());
    answer(&shared, &call, &outcome).await;
    for waiter in &waiters {
        answer(&shared, waiter, &outcome).await;
    }
}

/// A status update of `call` to its `Mesh-Status-To`, when it has one.
async fn send_status(shared: &Shared, call: &Call, state: TaskState) {
    if let Some(to) = &call.status_to {
        let headers = protocol::reply_headers("", Some(&call.headers));
        let update = protocol::status_update(call, state);
        shared
            .publish(to, headers, &update, call.token.as_deref())
            .await;
    }
}

async fn answer(shared: &Shared, call: &Call, outcome: &Outcome) {
    let Some(to) = &call.reply_to else {
        tracing::debug!(agent = %shared.name, task = %call.task_id, "no reply subject; result dropped");
        return;
    };
    let reply = protocol::reply(call, outcome);
    shared
        .publish(to, call.reply_headers(), &reply, call.token.as_deref())
        .await;
}

/// Whether `uri` names an object of `bucket`: a caller may not make the agent read, with
/// its own permissions, from a bucket the caller chose.
fn names_own_bucket(uri: &str, bucket: &str) -> bool {
    messages::payload::parse_object_uri(uri).is_some_and(|(b, _)| b == bucket)
}

/// Loads and checks the input, runs the handler in a task of its own (so a panic or an
/// abort cannot take the call down without an answer), checks and stores the output.
async fn process(shared: &Arc<Shared>, call: &Call) -> Outcome {
    let input = match &call.input {
        InputSource::Inline(v) => v.clone(),
        InputSource::Artifact { uri, .. } if !names_own_bucket(uri, shared.artifacts.bucket()) => {
            return Outcome::failure(
                format!(
                    "the input artifact '{uri}' is not in the mesh's artifact bucket '{}': an agent reads inputs only from there",
                    shared.artifacts.bucket()
                ),
                None,
            )
        }
        InputSource::Artifact { uri, wrapped } => match shared.artifacts.get_uri(uri).await {
            Ok(v) if *wrapped => v.get("value").cloned().unwrap_or(Value::Null),
            Ok(v) => v,
            Err(e) => return Outcome::failure(format!("cannot read the input: {e}"), None),
        },
        InputSource::Unsupported(why) => return Outcome::failure(why.clone(), None),
    };
    let schemas = call.node_request.as_ref();
    let input_schema = match requested(schemas.and_then(|r| r.input_schema.as_ref())) {
        Ok(s) => s,
        Err(e) => {
            return Outcome::failure(format!("the request's input_schema is invalid: {e}"), None)
        }
    };
    let output_schema = match requested(schemas.and_then(|r| r.output_schema.as_ref())) {
        Ok(s) => s,
        Err(e) => {
            return Outcome::failure(format!("the request's output_schema is invalid: {e}"), None)
        }
    };
    let mut input = input;
    let own = shared.input_schema.as_ref();
    if let Err(refusal) = conform("input", own, input_schema.as_ref(), &mut input) {
        return refusal;
    }
    let request = NodeRequest {
        input,
        instruction: call.instruction.clone(),
        workflow: call.workflow.clone(),
        task_id: call.task_id.clone(),
        context_id: call.context_id.clone(),
        message_id: call.message_id.clone(),
        headers: call.headers.clone(),
        agent: shared.name.clone(),
        status: call.status_to.clone().map(|subject| StatusSink {
            client: shared.client.clone(),
            subject,
            request_id: call.id.clone(),
            headers: protocol::reply_headers("", Some(&call.headers)),
            token: call.token.clone(),
        }),
    };
    let handler = shared.handler.clone();
    // The handler runs in the call's span: its own spans, and the calls it makes, nest
    // under it.
    let mut task = tokio::spawn(handler.call(request).in_current_span());
    // Aborts the handler when this future is dropped (a cancel won the race).
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _abort = AbortOnDrop(task.abort_handle());
    let mut output = match (&mut task).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Outcome::failure(e.message, e.kind),
        Err(e) if e.is_panic() => return Outcome::failure("the agent's handler panicked", None),
        Err(_) => return Outcome::Canceled,
    };
    let own = shared.output_schema.as_ref();
    if let Err(refusal) = conform("output", own, output_schema.as_ref(), &mut output) {
        return refusal;
    }
    store_output(shared, call, output).await
}

/// The schema a request brings (JSON null counts as none), compiled.
fn requested(source: Option<&Value>) -> Result<Option<Schema>, String> {
    source
        .filter(|v| !v.is_null())
        .map(Schema::compile)
        .transpose()
}

/// Checks `value` (the call's `what`, `input` or `output`) against the agent's own schema,
/// then against the request's: each applies its defaults, and the first with violations
/// refuses it. The agent's schema always applies, so a request's schema can only add
/// constraints: a caller that sends `{}` cannot turn the agent's check off, and a workflow
/// that narrows a node's input still gets its narrower check.
fn conform(
    what: &str,
    own: Option<&Schema>,
    requested: Option<&Schema>,
    value: &mut Value,
) -> Result<(), Outcome> {
    let kind = match what {
        "input" => KIND_INPUT_VALIDATION,
        _ => KIND_OUTPUT_VALIDATION,
    };
    let schemas = [(own, "the agent's"), (requested, "the request's")];
    for (schema, whose) in schemas.iter().filter_map(|(s, w)| Some((s.as_ref()?, w))) {
        schema.apply_defaults(value);
        let violations = schema.violations(what, value);
        if !violations.is_empty() {
            return Err(Outcome::Failure {
                message: format!(
                    "the {what} does not match {whose} {what} schema ({})",
                    crate::schema::counted(&violations)
                ),
                kind: Some(kind.into()),
                validation_errors: violations,
            });
        }
    }
    Ok(())
}

/// Inline when small, else stored as `{task_id}/{random}/{suggested name or output.json}`,
/// the random part the key to the object (see [`crate::artifacts::unguessable`]).
async fn store_output(shared: &Shared, call: &Call, output: Value) -> Outcome {
    let size = match serde_json::to_vec(&output) {
        Ok(b) => b.len(),
        Err(e) => return Outcome::failure(format!("the output is not JSON: {e}"), None),
    };
    if size <= shared.artifact_threshold {
        return Outcome::Success(Output::Inline(output));
    }
    let file = call
        .node_request
        .as_ref()
        .and_then(|r| r.suggested_output_filename.clone())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| "output.json".into());
    // The name is the only key to the object: a random part keeps whoever knows the
    // task id (the caller's side, operators) from reading it without the reply.
    let name = format!(
        "{}/{}/{file}",
        call.task_id,
        crate::artifacts::unguessable()
    );
    match shared.artifacts.put_json(&name, &output).await {
        Ok(_) => Outcome::Success(Output::Artifact {
            bucket: shared.artifacts.bucket().to_owned(),
            name,
        }),
        Err(e) => Outcome::failure(format!("cannot store the output: {e}"), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(v: Value) -> Schema {
        Schema::compile(&v).expect("a schema")
    }

    fn refusal(r: Result<(), Outcome>) -> String {
        match r {
            Err(Outcome::Failure { message, kind, .. }) => {
                assert_eq!(kind.as_deref(), Some(KIND_INPUT_VALIDATION));
                message
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_agents_schema_applies_whatever_the_request_sends() {
        let own = schema(json!({"type": "object", "required": ["value"]}));
        let anything = schema(json!({}));
        let mut input = json!({"other": 1});
        let why = refusal(conform("input", Some(&own), Some(&anything), &mut input));
        assert!(why.contains("the agent's input schema"), "{why}");
        // A request's schema adds its own constraints.
        let narrower = schema(json!({"type": "object", "required": ["extra"]}));
        let mut input = json!({"value": 1});
        let why = refusal(conform("input", Some(&own), Some(&narrower), &mut input));
        assert!(why.contains("the request's input schema"), "{why}");
        let mut input = json!({"value": 1, "extra": 2});
        assert!(conform("input", Some(&own), Some(&narrower), &mut input).is_ok());
        assert!(conform("input", None, None, &mut json!(null)).is_ok());
    }
}
