//! [`AgentBuilder`] declares an agent (name, description, skills, schemas, handler) and
//! [`AgentBuilder::serve`] puts it on the mesh, returning an [`AgentHandle`].

use std::sync::Arc;
use std::time::Duration;

use messages::card::AgentCard;
use messages::subjects;
use messages::AgentSkill;
use serde_json::Value;

use crate::artifacts::DEFAULT_ARTIFACT_THRESHOLD;
use crate::error::ServeError;
use crate::handler::{DynHandler, Handler};
use crate::schema::Schema;

/// The namespace agents join unless told otherwise.
pub const DEFAULT_NAMESPACE: &str = "mesh";
/// How often the card is republished unless told otherwise.
pub const DEFAULT_CARD_INTERVAL: Duration = Duration::from_secs(10);
/// How many handlers run at once unless told otherwise.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// How often a running call sends a `working` update to its caller's `Mesh-Status-To`
/// unless told otherwise: well inside callers' resend interval (3 s by default), so a
/// caller does not resend to a call that is alive.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How many finished calls an agent remembers, to answer copies of their requests, unless
/// told otherwise.
pub const DEFAULT_DEDUP_CAPACITY: usize = 1024;
/// How long an agent remembers a finished call unless told otherwise: longer than a caller
/// keeps resending one request, and than a workflow node takes to re-dispatch a call after
/// a crash.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(300);

/// A skill for [`AgentBuilder::skill`]: `id`, a name and a description, no tags.
pub fn skill(
    id: impl Into<String>,
    name: impl Into<String>,
    description: impl Into<String>,
) -> AgentSkill {
    AgentSkill {
        id: id.into(),
        name: name.into(),
        description: description.into(),
        tags: Vec::new(),
        examples: None,
        input_modes: None,
        output_modes: None,
    }
}

/// Declares an agent; [`AgentBuilder::serve`] starts it.
///
/// ```no_run
/// # async fn demo(client: async_nats::Client) -> Result<(), agent_sdk::ServeError> {
/// use agent_sdk::{handler_fn, AgentBuilder};
/// let handle = AgentBuilder::new("Echo")
///     .description("Answers with its input")
///     .handler(handler_fn(|req| async move { Ok(req.input) }))
///     .serve(client)
///     .await?;
/// handle.stop().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AgentBuilder {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) version: String,
    pub(crate) skills: Vec<AgentSkill>,
    pub(crate) input_schema: Option<Value>,
    pub(crate) output_schema: Option<Value>,
    pub(crate) namespace: String,
    pub(crate) card_interval: Duration,
    pub(crate) artifact_threshold: usize,
    pub(crate) max_in_flight: usize,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) dedup_capacity: usize,
    pub(crate) dedup_window: Duration,
    pub(crate) handler: Option<Arc<dyn DynHandler>>,
    pub(crate) signer: Option<crate::Signer>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("handler", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// An agent called `name` (one subject token) in the default namespace.
    pub fn new(name: impl Into<String>) -> Self {
        AgentBuilder {
            name: name.into(),
            description: String::new(),
            version: "1.0.0".into(),
            skills: Vec::new(),
            input_schema: None,
            output_schema: None,
            namespace: DEFAULT_NAMESPACE.into(),
            card_interval: DEFAULT_CARD_INTERVAL,
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            dedup_capacity: DEFAULT_DEDUP_CAPACITY,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            handler: None,
            signer: None,
        }
    }

    /// Signs every copy of the agent's card with `signer` (see [`crate::card_trust`]):
    /// readers that bind the agent's name to its key take only these. Load the key with
    /// [`crate::Signer::from_seed_file`] (`stub-agents --nkey-seed-file`).
    pub fn signer(mut self, signer: crate::Signer) -> Self {
        self.signer = Some(signer);
        self
    }

    /// What the agent does (shown in its card).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The agent's version (default `1.0.0`).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Adds a skill to the card (see [`skill`]).
    pub fn skill(mut self, skill: AgentSkill) -> Self {
        self.skills.push(skill);
        self
    }

    /// The JSON Schema inputs must satisfy; advertised in the card and enforced (unless a
    /// request brings its own).
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// The JSON Schema outputs must satisfy; advertised and enforced likewise.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The namespace (subject prefix), default `mesh`.
    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = ns.into();
        self
    }

    /// How often the card is republished (default 10 s).
    pub fn card_interval(mut self, interval: Duration) -> Self {
        self.card_interval = interval;
        self
    }

    /// Outputs whose JSON is larger than this many bytes go to the object store (default
    /// 256 KiB).
    pub fn artifact_threshold(mut self, bytes: usize) -> Self {
        self.artifact_threshold = bytes;
        self
    }

    /// How many handlers may run at once (default 64; at least 1). Further requests wait.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self
    }

    /// How often a running handler's caller gets a `working` status update (default 1 s,
    /// at least 1 ms), when it asked for updates (`Mesh-Status-To`). Keep it below the
    /// callers' resend interval: a copy that a queue-group peer receives runs there again.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// How many finished calls to remember (default 1024), and for how long (default 5
    /// min). A request whose task id is among them gets the remembered answer again
    /// without running the handler; `0` remembers none. A copy of a request whose task is
    /// running is never run twice, whatever this says. Canceled calls are not remembered.
    pub fn dedup(mut self, capacity: usize, window: Duration) -> Self {
        self.dedup_capacity = capacity;
        self.dedup_window = window;
        self
    }

    /// The agent's behaviour.
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// The card this agent publishes: URL `nats:{request subject}`, the skills, and the
    /// schemas extension when a schema is set.
    pub fn card(&self) -> AgentCard {
        let url = format!(
            "nats:{}",
            subjects::agent_request(&self.namespace, &self.name)
        );
        let mut card = AgentCard::new(&self.name, &self.description, url, &self.version)
            .with_schemas(self.input_schema.clone(), self.output_schema.clone());
        card.skills = self.skills.clone();
        card
    }

    /// Checks names and schemas and compiles the schemas.
    pub(crate) fn check(&self) -> Result<(Option<Schema>, Option<Schema>), ServeError> {
        subjects::validate_token(&self.name).map_err(ServeError::InvalidName)?;
        subjects::validate_namespace(&self.namespace).map_err(ServeError::InvalidNamespace)?;
        let compile = |which: &'static str, s: &Option<Value>| {
            s.as_ref()
                .map(|s| {
                    Schema::compile(s).map_err(|reason| ServeError::InvalidSchema {
                        agent: self.name.clone(),
                        which,
                        reason,
                    })
                })
                .transpose()
        };
        Ok((
            compile("input_schema", &self.input_schema)?,
            compile("output_schema", &self.output_schema)?,
        ))
    }

    /// Starts serving on `client`: subscribes (request subject in queue group `name`,
    /// cancel broadcast, discovery ping), publishes the card, and returns once the
    /// subscriptions are registered with the server, so requests sent after this returns
    /// are answered.
    pub async fn serve(self, client: async_nats::Client) -> Result<AgentHandle, ServeError> {
        crate::server::start(self, client).await
    }
}

/// A serving agent. [`AgentHandle::stop`] stops it and waits for running calls to answer;
/// dropping the handle stops taking requests too (running calls still answer).
#[derive(Debug)]
pub struct AgentHandle {
    pub(crate) name: String,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}

impl AgentHandle {
    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops taking requests (drains the subscription: requests the server delivered
    /// before the unsubscribe are still handled), then waits until every call it took has
    /// answered and the server has the answers, so the process may exit next.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await;
    }

    /// Waits until the agent stops by itself (its connection closed).
    pub async fn wait(mut self) {
        self.join().await;
    }

    async fn join(&mut self) {
        if let Some(task) = self.task.take() {
            if let Err(e) = task.await {
                tracing::warn!(agent = %self.name, "agent task ended abnormally: {e}");
            }
        }
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        // Dropping the sender wakes the serving loop, which unsubscribes and drains.
        self.stop.take();
    }
}
