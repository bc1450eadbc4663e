//! The caller's handle on the mesh: connect once, then call agents and workflows, look
//! at the catalog of cards, and serve agents, all from one [`Mesh`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agent_sdk::Mesh;
//! use serde_json::json;
//! let mesh = Mesh::connect("nats://127.0.0.1:4222").await?;
//! let out = mesh.agent("Summariser").timeout(std::time::Duration::from_secs(30))
//!     .call(json!({"text": "..."})).await?;
//! # Ok(()) }
//! ```
//!
//! A call is a [`Call`]: awaiting it gives the output; before that, [`Call::progress`]
//! streams the run's progress as typed [`Progress`] events and [`Call::cancel`] cancels it.
//! Dropping a call that has not ended cancels it too (a `tasks/cancel` on the callee's
//! cancel subject, which workflows and SDK agents both serve).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::{Client, HeaderMap};
use messages::payload::{artifact_part, object_ref, object_uri};
use messages::reply::{read_task, TaskReading};
use messages::subjects;
use messages::workflow::{
    WorkflowAgentStatus, WorkflowApprovalRequest, WorkflowDataPart, WorkflowExecutionResult,
    WorkflowExecutionStart, WorkflowMapProgress, WorkflowNodeExecutionResult,
    WorkflowNodeExecutionStart,
};
use messages::{Part, Task, TaskState, TaskStatusUpdateEvent};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::agent::{AgentBuilder, AgentHandle, DEFAULT_NAMESPACE};
use crate::artifacts::{ArtifactStore, DEFAULT_ARTIFACT_THRESHOLD};
use crate::catalog::{Catalog, CatalogError, DEFAULT_CARD_EXPIRY};
use crate::error::MalformedReply;
use crate::error::{CallError, ServeError};
use crate::exchange::{ExchangeError, DEFAULT_RESEND_INTERVAL};

/// The timeout of calls unless told otherwise: 60 s.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to the mesh in one namespace, with the defaults of the calls made through
/// it. Cheap to clone (the client is shared).
#[derive(Debug, Clone)]
pub struct Mesh {
    client: Client,
    ns: String,
    defaults: CallOptions,
    card_trust: crate::CardTrust,
}

impl Mesh {
    /// Connects to the NATS server at `url`, namespace `mesh`.
    pub async fn connect(url: &str) -> Result<Mesh, async_nats::ConnectError> {
        Ok(Mesh::new(async_nats::connect(url).await?))
    }

    /// Connects to the NATS server(s) at `url` as `config` says (user, NKey or
    /// credentials, TLS, inbox prefix: see [`crate::connect`]), namespace `mesh`.
    pub async fn connect_with(
        url: &str,
        config: &crate::ConnectConfig,
    ) -> Result<Mesh, crate::ConnectConfigError> {
        Ok(Mesh::new(config.connect(url).await?))
    }

    /// The mesh reached through `client`, namespace `mesh`.
    pub fn new(client: Client) -> Mesh {
        Mesh {
            client,
            ns: DEFAULT_NAMESPACE.to_owned(),
            defaults: CallOptions::new(DEFAULT_CALL_TIMEOUT),
            card_trust: crate::CardTrust::default(),
        }
    }

    /// This mesh in namespace `ns` (checked: one or more subject tokens joined by `.`).
    pub fn namespace(mut self, ns: impl Into<String>) -> Result<Mesh, messages::SubjectError> {
        let ns = ns.into();
        subjects::validate_namespace(&ns)?;
        self.ns = ns;
        Ok(self)
    }

    /// The default timeout of calls (default [`DEFAULT_CALL_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Mesh {
        self.defaults.timeout = timeout;
        self
    }

    /// Calls go out as agent `name` (the `Mesh-Caller` header: a workflow scopes task ids
    /// by it).
    pub fn caller(mut self, name: impl Into<String>) -> Mesh {
        self.defaults.caller = Some(name.into());
        self
    }

    /// Calls, and their cancels, are signed by `signer` (see [`crate::signing`]): a
    /// workflow lets only that key, or an operator, cancel the runs they start.
    pub fn signer(mut self, signer: crate::signing::Signer) -> Mesh {
        self.defaults.signer = Some(signer);
        self
    }

    /// Which keys may sign the cards of which names in this mesh's catalogs (see
    /// [`crate::card_trust`]; default: the first key seen per name, unsigned cards taken
    /// for names without one).
    pub fn card_trust(mut self, trust: crate::CardTrust) -> Mesh {
        self.card_trust = trust;
        self
    }

    /// The card trust of this mesh's catalogs.
    pub fn cards_trusted(&self) -> &crate::CardTrust {
        &self.card_trust
    }

    /// The defaults every call starts from (see [`CallOptions`]).
    pub fn defaults(mut self, options: CallOptions) -> Mesh {
        self.defaults = options;
        self
    }

    /// The NATS client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// Returns once the server has taken every message and subscription this connection
    /// sent before the call. A flush only writes them to the socket: another connection
    /// publishing a moment later could still meet "no responders". (A message sent to
    /// itself coming back proves it, as a server handles a connection's messages in order.)
    pub async fn roundtrip(&self) -> Result<(), crate::error::RoundtripError> {
        crate::roundtrip::roundtrip(&self.client).await
    }

    /// The artifacts (object store) of the namespace: `put(name, bytes, mime)` returns
    /// `{name, version}`, `get` and `list(run)` read them back (see [`ArtifactStore`]).
    pub fn artifacts(&self) -> ArtifactStore {
        ArtifactStore::new(self.client.clone(), &self.ns)
    }

    /// A call to agent (or workflow) `name`, to set up with the builder methods and start
    /// with [`AgentCall::call`].
    pub fn agent(&self, name: impl Into<String>) -> AgentCall {
        AgentCall {
            mesh: self.clone(),
            agent: name.into(),
            options: self.defaults.clone(),
            task_id: None,
        }
    }

    /// Serves `agent` in this mesh's namespace (see [`AgentBuilder::serve`]).
    pub async fn serve(&self, agent: AgentBuilder) -> Result<AgentHandle, ServeError> {
        agent
            .namespace(self.ns.clone())
            .serve(self.client.clone())
            .await
    }

    /// A live catalog of the cards on the mesh (see [`Catalog`]); cards expire after
    /// [`DEFAULT_CARD_EXPIRY`] without a new copy.
    pub async fn catalog(&self) -> Result<Catalog, CatalogError> {
        Catalog::start(self.clone(), DEFAULT_CARD_EXPIRY).await
    }

    /// [`Mesh::catalog`] whose cards expire `expiry` after their last copy.
    pub async fn catalog_with_expiry(&self, expiry: Duration) -> Result<Catalog, CatalogError> {
        Catalog::start(self.clone(), expiry).await
    }
}

/// A call being set up: builder methods, then [`AgentCall::call`].
#[derive(Debug, Clone)]
#[must_use = "a call does nothing until `.call(input)`"]
pub struct AgentCall {
    mesh: Mesh,
    agent: String,
    options: CallOptions,
    task_id: Option<String>,
}

impl AgentCall {
    /// How long to wait for the final reply, from the first send.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// Silence after which the request is sent again, with the same task id (see
    /// [`crate::Timing`]).
    pub fn resend_interval(mut self, interval: Duration) -> Self {
        self.options.resend_interval = interval;
        self
    }

    /// Adds a header to the request (a `traceparent` is replaced by the current span's
    /// when traces are exported).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.options.headers.insert(name, value);
        self
    }

    /// Adds `headers` to the request (for a handler calling onward:
    /// [`crate::NodeRequest::onward_headers`], which carry the call depth).
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        for (name, values) in headers.iter() {
            for value in values {
                self.options.headers.append(name.clone(), value.clone());
            }
        }
        self
    }

    /// The task id (default: a fresh one). The same task id from the same caller reaches
    /// the same run, so a caller that restarts can pick its call up again.
    pub fn task_id(mut self, id: impl Into<String>) -> Self {
        self.task_id = Some(id.into());
        self
    }

    /// An instruction sent as a TextPart before the input.
    pub fn instruction(mut self, text: impl Into<String>) -> Self {
        self.options.instruction = Some(text.into());
        self
    }

    /// Calls as agent `name` (the `Mesh-Caller` header).
    pub fn caller(mut self, name: impl Into<String>) -> Self {
        self.options.caller = Some(name.into());
        self
    }

    /// Signs the request and its cancel with `signer` (see [`Mesh::signer`]).
    pub fn signer(mut self, signer: crate::signing::Signer) -> Self {
        self.options.signer = Some(signer);
        self
    }

    /// Inputs whose JSON is larger go through the object store.
    pub fn artifact_threshold(mut self, bytes: usize) -> Self {
        self.options.artifact_threshold = bytes;
        self
    }

    /// Starts the call with `input` (in a tokio task: call from within a runtime). Await
    /// the returned [`Call`] for the output.
    pub fn call(self, input: Value) -> Call {
        self.start(Input::Value(input))
    }

    /// Starts the call with the input stored in an artifact: a `nats-object://` URI, or an
    /// object name in the namespace's artifact bucket.
    pub fn call_with_artifact(self, reference: &str) -> Call {
        self.start(Input::Artifact(reference.to_owned()))
    }

    pub(crate) fn start(self, input: Input) -> Call {
        let AgentCall {
            mesh,
            agent,
            options,
            task_id,
        } = self;
        let id = task_id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let (tx, rx) = mpsc::unbounded_channel();
        let mut headers = options.headers.clone();
        // Taken here, in the caller's context: the spawned task has none of its own.
        crate::telemetry::inject_current(&mut headers);
        let options = CallOptions { headers, ..options };
        let cancel = Canceller {
            client: mesh.client.clone(),
            subject: subjects::validate_token(&agent)
                .ok()
                .map(|_| subjects::agent_cancel(&mesh.ns, &agent)),
            task_id: id.clone(),
            caller: options.caller.clone().filter(|c| !c.is_empty()),
            signer: options.signer.clone(),
        };
        let run = run_call(
            mesh.client.clone(),
            mesh.ns.clone(),
            agent.clone(),
            id.clone(),
            input,
            options,
            move |p| {
                let _ = tx.send(p);
            },
        );
        Call {
            agent,
            task_id: id,
            mesh,
            progress: Some(rx),
            task: Some(tokio::spawn(run.instrument(tracing::Span::current()))),
            cancel: Some(cancel),
        }
    }
}

/// Options of a call: what [`Mesh::defaults`] sets for every call and [`AgentCall`]'s
/// builder methods change for one.
#[derive(Debug, Clone)]
pub struct CallOptions {
    /// How long to wait for the final reply, from the first send.
    pub timeout: Duration,
    /// Silence after which the request is sent again, with the same task id (default
    /// [`DEFAULT_RESEND_INTERVAL`]; see [`crate::Timing`]).
    pub resend_interval: Duration,
    /// An instruction sent as a TextPart before the input.
    pub instruction: Option<String>,
    /// Extra headers (trace context, call depth: see
    /// [`crate::NodeRequest::onward_headers`]). When traces are exported, the current
    /// span's context replaces a `traceparent` here (see [`crate::telemetry`]).
    pub headers: HeaderMap,
    /// Inputs whose JSON is larger go through the object store.
    pub artifact_threshold: usize,
    /// The calling agent's name, sent as `Mesh-Caller`: a workflow scopes task ids by it
    /// (see `messages::headers::CALLER`). Overrides a `Mesh-Caller` in `headers`.
    pub caller: Option<String>,
    /// Who signs the request (and its cancel): a workflow then lets only this key (or an
    /// operator) cancel the run. See [`crate::signing`].
    pub signer: Option<crate::signing::Signer>,
}

impl CallOptions {
    /// Default options with `timeout`.
    pub fn new(timeout: Duration) -> Self {
        CallOptions {
            timeout,
            resend_interval: DEFAULT_RESEND_INTERVAL,
            instruction: None,
            headers: HeaderMap::new(),
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
            caller: None,
            signer: None,
        }
    }

    /// These options, calling as agent `name` (the `Mesh-Caller` header).
    pub fn with_caller(mut self, name: impl Into<String>) -> Self {
        self.caller = Some(name.into());
        self
    }

    /// These options, with requests signed by `signer`.
    pub fn with_signer(mut self, signer: crate::signing::Signer) -> Self {
        self.signer = Some(signer);
        self
    }
}

/// What a call sends as input.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    /// A value, inline or through the object store by size.
    Value(Value),
    /// A stored artifact: a `nats-object://` URI or a name in the namespace's bucket.
    Artifact(String),
}

/// The progress of a call, as the callee reports it: a workflow's DataParts, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// The run began (its execution id names it).
    RunStarted(WorkflowExecutionStart),
    /// A node (or a map item, a loop iteration) began.
    NodeStarted(WorkflowNodeExecutionStart),
    /// A node ended.
    NodeFinished(WorkflowNodeExecutionResult),
    /// An item of a map succeeded.
    MapProgress(WorkflowMapProgress),
    /// An approval node waits for a decision.
    ApprovalRequested(WorkflowApprovalRequest),
    /// An agent called by the run reported how it is going.
    AgentStatus(WorkflowAgentStatus),
    /// The run ended (its final reply follows).
    RunFinished(WorkflowExecutionResult),
    /// The run was paused or resumed.
    RunSteered(messages::control::WorkflowRunSteered),
    /// A status update with text and no workflow DataPart (an agent's own words).
    Status {
        /// The task's state in the update.
        state: TaskState,
        /// Its text parts, joined.
        text: String,
    },
}

impl Progress {
    /// The progress events of one status update (heartbeats without text give none).
    fn of_update(update: &TaskStatusUpdateEvent) -> Vec<Progress> {
        let parts = update
            .status
            .message
            .as_ref()
            .map(|m| m.parts.as_slice())
            .unwrap_or_default();
        let mut events: Vec<Progress> = parts
            .iter()
            .filter_map(Part::as_data)
            .filter_map(|d| WorkflowDataPart::from_data(d).ok().flatten())
            .filter_map(|d| match d {
                WorkflowDataPart::ExecutionStart(p) => Some(Progress::RunStarted(p)),
                WorkflowDataPart::NodeExecutionStart(p) => Some(Progress::NodeStarted(p)),
                WorkflowDataPart::NodeExecutionResult(p) => Some(Progress::NodeFinished(p)),
                WorkflowDataPart::MapProgress(p) => Some(Progress::MapProgress(p)),
                WorkflowDataPart::ApprovalRequest(p) => Some(Progress::ApprovalRequested(p)),
                WorkflowDataPart::AgentStatus(p) => Some(Progress::AgentStatus(p)),
                WorkflowDataPart::ExecutionResult(p) => Some(Progress::RunFinished(p)),
                WorkflowDataPart::RunSteered(p) => Some(Progress::RunSteered(p)),
                _ => None,
            })
            .collect();
        let text = update
            .status
            .message
            .as_ref()
            .map(|m| m.text())
            .unwrap_or_default();
        if events.is_empty() && !text.is_empty() {
            events.push(Progress::Status {
                state: update.status.state,
                text,
            });
        }
        events
    }
}

/// The progress of a [`Call`], as a [`futures::Stream`]; it ends when the call does.
#[derive(Debug)]
pub struct ProgressStream(mpsc::UnboundedReceiver<Progress>);

impl futures::Stream for ProgressStream {
    type Item = Progress;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Progress>> {
        self.0.poll_recv(cx)
    }
}

/// A call's output as the callee gave it: a value, or a reference to the artifact that
/// holds it (not fetched).
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The output, inline.
    Value(Value),
    /// The output is stored: `nats-object://{bucket}/{name}`.
    Stored(String),
}

/// How a call ended, before its output is read.
#[derive(Debug)]
pub(crate) struct Ended {
    task: Task,
    run: Option<WorkflowExecutionResult>,
}

/// A running call. Await it for the output (stored outputs fetched), or use
/// [`Call::output`] to get stored outputs as references; [`Call::progress`] streams its
/// progress, [`Call::cancel`] cancels it, and dropping it before it ends cancels it too.
#[derive(Debug)]
#[must_use = "dropping a call cancels it"]
pub struct Call {
    agent: String,
    task_id: String,
    mesh: Mesh,
    progress: Option<mpsc::UnboundedReceiver<Progress>>,
    task: Option<tokio::task::JoinHandle<Result<Ended, CallError>>>,
    cancel: Option<Canceller>,
}

impl Call {
    /// The agent or workflow called.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The call's task id (what a `tasks/cancel` or `tasks/get` of it names).
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The progress events, as a stream that ends with the call. Only the first call of
    /// this returns them all; later calls get an empty stream.
    pub fn progress(&mut self) -> ProgressStream {
        ProgressStream(self.progress.take().unwrap_or_else(|| {
            let (_, rx) = mpsc::unbounded_channel();
            rx
        }))
    }

    /// Asks the callee to cancel the call and waits for its final reply: normally
    /// [`CallError::Canceled`], or the output when the call ended first.
    pub async fn cancel(self) -> Result<Value, CallError> {
        if let Some(cancel) = &self.cancel {
            cancel.send().await;
        }
        self.value().await
    }

    /// Waits for the output; a stored output comes back as [`Output::Stored`], unread.
    pub async fn output(mut self) -> Result<Output, CallError> {
        let ended = self.ended().await?;
        let artifacts = self.mesh.artifacts();
        let reading = reading(&self.agent, &ended)?;
        match reading {
            TaskReading::Output(v) => Ok(Output::Value(v)),
            TaskReading::Object(uri) => Ok(Output::Stored(uri)),
            TaskReading::Artifact(name) => Ok(Output::Stored(
                object_ref(&name, artifacts.bucket())
                    .map(|(b, n)| object_uri(b, n))
                    .unwrap_or(name),
            )),
            TaskReading::Failed(f) => Err(failure(&self.agent, f, ended.run)),
        }
    }

    async fn value(mut self) -> Result<Value, CallError> {
        let ended = self.ended().await?;
        read_value(&self.mesh.artifacts(), &self.agent, ended).await
    }

    /// The final reply; the call no longer needs cancelling once it is in.
    /// (The task stays in `self` while awaited: a caller that drops the awaiting future
    /// drops the call, which then cancels it.)
    async fn ended(&mut self) -> Result<Ended, CallError> {
        let task = self.task.as_mut().expect("a call's result is taken once");
        let joined = task.await;
        self.task = None;
        let ended = match joined {
            Ok(ended) => ended,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(CallError::Canceled {
                agent: self.agent.clone(),
            }),
        };
        self.cancel = None;
        ended
    }
}

impl IntoFuture for Call {
    type Output = Result<Value, CallError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.value())
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        if task.is_finished() {
            return;
        }
        task.abort();
        if let (Some(cancel), Ok(rt)) = (self.cancel.take(), tokio::runtime::Handle::try_current())
        {
            rt.spawn(async move { cancel.send().await });
        }
    }
}

/// What cancelling a call takes: a `tasks/cancel` of its task id on the callee's cancel
/// subject, as the caller (a workflow finds the run by the caller's name and task id, and
/// lets the key that signed the call, if one did, cancel it).
#[derive(Debug)]
struct Canceller {
    client: Client,
    /// `None` when the agent's name is not a subject token (the call itself failed).
    subject: Option<String>,
    task_id: String,
    caller: Option<String>,
    signer: Option<crate::signing::Signer>,
}

impl Canceller {
    async fn send(&self) {
        let Some(subject) = &self.subject else {
            return;
        };
        let request = messages::Request::tasks_cancel(
            format!("cancel-{}", self.task_id),
            self.task_id.as_str(),
        );
        let body = serde_json::to_vec(&request).expect("a tasks/cancel serialises to JSON");
        let mut headers = HeaderMap::new();
        if let Some(caller) = &self.caller {
            headers.insert(messages::headers::CALLER, caller.as_str());
        }
        if let Some(signer) = &self.signer {
            let now = std::time::SystemTime::now();
            signer.sign_into(&mut headers, subject, None, &body, now);
        }
        let sent = self
            .client
            .publish_with_headers(subject.clone(), headers, body.into())
            .await;
        if let Err(e) = sent.map(|_| ()) {
            tracing::warn!(%subject, task = %self.task_id, "the cancel could not be sent: {e}");
        } else if let Err(e) = self.client.flush().await {
            tracing::warn!(%subject, task = %self.task_id, "the cancel could not be flushed: {e}");
        }
    }
}

/// Sends a call and waits for its final reply, passing each progress event to `progress`.
pub(crate) async fn run_call(
    client: Client,
    ns: String,
    agent: String,
    id: String,
    input: Input,
    options: CallOptions,
    mut progress: impl FnMut(Progress) + Send,
) -> Result<Ended, CallError> {
    use crate::exchange::{send_until_answered, Outgoing, Timing};
    use messages::{Message, Request, Role};
    subjects::validate_namespace(&ns).map_err(CallError::InvalidSubject)?;
    subjects::validate_token(&agent).map_err(CallError::InvalidSubject)?;
    let artifacts = ArtifactStore::new(client.clone(), &ns);
    let mut parts = Vec::new();
    if let Some(text) = options.instruction {
        parts.push(Part::text(text));
    }
    parts.push(match input {
        Input::Value(input) => {
            artifacts
                .encode(
                    input,
                    // The name is the only key to the object: random, not derived from
                    // the call's id (which the callee and the workflow node see).
                    &format!("input/{id}-{}.json", crate::artifacts::unguessable()),
                    options.artifact_threshold,
                )
                .await?
        }
        Input::Artifact(reference) => {
            let (bucket, name) = object_ref(&reference, artifacts.bucket())
                .ok_or_else(|| crate::error::ArtifactError::BadUri(reference.clone()))?;
            artifact_part(bucket, name)
        }
    });
    let mut message = Message::new(id.clone(), Role::User, parts);
    message.task_id = Some(id.clone());
    message.context_id = Some(id.clone());
    let request = Request::message_send(id.clone(), message);
    let mut headers = options.headers;
    if let Some(caller) = options.caller.filter(|c| !c.is_empty()) {
        headers.insert(messages::headers::CALLER, caller.as_str());
    }
    let body = serde_json::to_vec(&request).expect("a message/send request serialises to JSON");
    let outgoing = Outgoing {
        subject: subjects::agent_request(&ns, &agent),
        id: id.into(),
        headers,
        body: body.into(),
        signer: options.signer,
    };
    let timing = Timing {
        timeout: options.timeout,
        resend_interval: options.resend_interval,
    };
    let mut run = None;
    let reply = send_until_answered(&client, outgoing, timing, |update| {
        for event in Progress::of_update(update) {
            if let Progress::RunFinished(r) = &event {
                run = Some(r.clone());
            }
            progress(event);
        }
    })
    .await
    .map_err(|e| call_error(&agent, e))?;
    let task =
        messages::reply::final_task(reply).expect("send_until_answered returns final replies");
    Ok(Ended { task, run })
}

/// What the final task says (never "not yet": it is final).
fn reading(agent: &str, ended: &Ended) -> Result<TaskReading, CallError> {
    let invalid = |source: MalformedReply| CallError::InvalidReply {
        agent: agent.to_owned(),
        source,
    };
    read_task(&ended.task)
        .map_err(|e| invalid(MalformedReply::NodeResult(e)))?
        .ok_or_else(|| invalid(MalformedReply::NotTerminal(ended.task.status.state)))
}

/// The [`CallError`] of a failed or canceled task; `run` (a workflow's last progress
/// update) names the failing node and has the run's own error message.
fn failure(
    agent: &str,
    f: messages::reply::TaskFailure,
    run: Option<WorkflowExecutionResult>,
) -> CallError {
    let agent = agent.to_owned();
    if f.state == TaskState::Canceled || f.kind.as_deref() == Some(crate::KIND_CANCELED) {
        return CallError::Canceled { agent };
    }
    let (run_message, node) = run
        .map(|r| (r.error_message, r.error_node_id))
        .unwrap_or_default();
    CallError::Failed {
        agent,
        message: run_message
            .or(f.message)
            .unwrap_or_else(|| match f.reported {
                true => "failed".into(),
                false => format!("task {:?}", f.state),
            }),
        kind: f.kind,
        validation_errors: f.validation_errors,
        node,
    }
}

/// The output of a call that ended, stored outputs fetched.
async fn read_value(
    artifacts: &ArtifactStore,
    agent: &str,
    ended: Ended,
) -> Result<Value, CallError> {
    match reading(agent, &ended)? {
        TaskReading::Output(value) => Ok(value),
        TaskReading::Artifact(name) => {
            let (bucket, name) = object_ref(&name, artifacts.bucket())
                .map(|(b, n)| (b.to_owned(), n.to_owned()))
                .unwrap_or_else(|| (artifacts.bucket().to_owned(), name));
            Ok(artifacts.get_json(&bucket, &name).await?)
        }
        TaskReading::Object(uri) => Ok(artifacts.get_uri(&uri).await?),
        TaskReading::Failed(f) => Err(failure(agent, f, ended.run)),
    }
}

/// The [`CallError`] of a failed exchange with `agent`.
pub(crate) fn call_error(agent: &str, e: ExchangeError) -> CallError {
    let agent = agent.to_owned();
    match e {
        ExchangeError::Connection(source) => CallError::Connection { agent, source },
        ExchangeError::NoResponders => CallError::NoResponders(agent),
        ExchangeError::TimedOut { sends } => CallError::TimedOut { agent, sends },
        ExchangeError::Refused(e) => CallError::Rpc {
            agent,
            code: e.code,
            message: e.message,
        },
        ExchangeError::Malformed(source) => CallError::InvalidReply { agent, source },
    }
}
