//! NATS subject names. Every subject the mesh uses is built here, never by an ad-hoc
//! `format!` elsewhere.
//!
//! Layout (the reference's topics with `/` → `.`): `{ns}.a2a.v1.discovery.agentcards`,
//! `{ns}.a2a.v1.agent.request.{agent}`, `{ns}.a2a.v1.agent.response.{workflow}.{sub_task}`,
//! `{ns}.a2a.v1.agent.status.{workflow}.{sub_task}`. Names put into a subject must be one
//! token; check them with [`validate_token`] when they are loaded, not when used. KV
//! writes published directly go to [`kv_key`].

/// Why a name cannot be a subject token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// The name is empty.
    #[error("a subject token must not be empty")]
    Empty,
    /// The name contains a character other than `A-Z a-z 0-9 _ -`.
    #[error("{name:?} is not a valid subject token: {ch:?} is not one of A-Z a-z 0-9 _ -")]
    InvalidChar {
        /// The rejected name, as given.
        name: String,
        /// The first offending character.
        ch: char,
    },
    /// The name is longer than [`MAX_TOKEN_LEN`].
    #[error("a subject token of {len} bytes is longer than {MAX_TOKEN_LEN}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
}

/// The longest subject token (an agent's or workflow's name, a namespace's token), in
/// bytes: names go into subjects, and subjects stay under [`MAX_SUBJECT_LEN`].
pub const MAX_TOKEN_LEN: usize = 128;

/// The longest subject anyone may ask to be answered on, in bytes. nats-server closes a
/// connection whose protocol line (`HPUB {subject} {reply} …`) exceeds its
/// `max_control_line` (4 KiB by default): a responder publishing to a longer subject a
/// requester chose would be disconnected, at every attempt. The mesh's own subjects are far
/// shorter.
pub const MAX_SUBJECT_LEN: usize = 256;

/// Checks that `name` is one subject token: `[A-Za-z0-9_-]+` (no `.`, `*`, `>` or spaces),
/// at most [`MAX_TOKEN_LEN`] bytes. Agent names, workflow names and namespaces' tokens
/// must pass.
pub fn validate_token(name: &str) -> Result<(), SubjectError> {
    if name.is_empty() {
        return Err(SubjectError::Empty);
    }
    if name.len() > MAX_TOKEN_LEN {
        return Err(SubjectError::TooLong { len: name.len() });
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        Some(ch) => Err(SubjectError::InvalidChar {
            name: name.to_owned(),
            ch,
        }),
        None => Ok(()),
    }
}

/// Checks a namespace: one or more tokens joined by `.` (e.g. `mesh` or `acme.prod`).
pub fn validate_namespace(ns: &str) -> Result<(), SubjectError> {
    ns.split('.').try_for_each(validate_token)
}

/// `{ns}.a2a.v1.discovery.agentcards`: where agent cards are published.
pub fn agent_cards(ns: &str) -> String {
    format!("{ns}.a2a.v1.discovery.agentcards")
}

/// `{ns}.a2a.v1.discovery.>`: everything discovery-related (subscribe to see all cards).
pub fn discovery_all(ns: &str) -> String {
    format!("{ns}.a2a.v1.discovery.>")
}

/// `{ns}.a2a.v1.agent.request.{agent}`: requests to an agent or a workflow.
pub fn agent_request(ns: &str, agent: &str) -> String {
    format!("{ns}.a2a.v1.agent.request.{agent}")
}

/// `{ns}.a2a.v1.agent.response.{workflow}.{sub_task_id}`: the final reply of one call
/// made by `workflow`.
pub fn agent_response(ns: &str, workflow: &str, sub_task_id: &str) -> String {
    format!("{ns}.a2a.v1.agent.response.{workflow}.{sub_task_id}")
}

/// `{ns}.a2a.v1.agent.response.{workflow}.>`: every final reply to `workflow`'s calls.
pub fn agent_response_all(ns: &str, workflow: &str) -> String {
    format!("{ns}.a2a.v1.agent.response.{workflow}.>")
}

/// `{ns}.a2a.v1.agent.status.{workflow}.{sub_task_id}`: status updates of one call made by
/// `workflow`.
pub fn agent_status(ns: &str, workflow: &str, sub_task_id: &str) -> String {
    format!("{ns}.a2a.v1.agent.status.{workflow}.{sub_task_id}")
}

/// `{ns}.a2a.v1.agent.status.{workflow}.>`: every status update of `workflow`'s calls.
pub fn agent_status_all(ns: &str, workflow: &str) -> String {
    format!("{ns}.a2a.v1.agent.status.{workflow}.>")
}

/// `{ns}.a2a.v1.discovery.ping`: any message asks every agent to republish its card.
pub fn discovery_ping(ns: &str) -> String {
    format!("{ns}.a2a.v1.discovery.ping")
}

/// `{ns}.a2a.v1.agent.cancel.{agent}`: `tasks/cancel` broadcast to every replica of `agent`.
pub fn agent_cancel(ns: &str, agent: &str) -> String {
    format!("{ns}.a2a.v1.agent.cancel.{agent}")
}

/// `{ns}.a2a.v1.hook.{name}`: webhook deliveries to `POST /hooks/{name}`, forwarded by an
/// HTTP door to the node that declares the hook (see [`crate::hooks`]).
pub fn hook(ns: &str, name: &str) -> String {
    format!("{ns}.a2a.v1.hook.{name}")
}

/// `{ns}.a2a.v1.approval.{workflow}`: approval requests of `workflow`, for approver tools.
pub fn approvals(ns: &str, workflow: &str) -> String {
    format!("{ns}.a2a.v1.approval.{workflow}")
}

/// `{ns}.wf.{workflow}.events.{execution}`: internal events of one run (starts, cancels,
/// approvals, timers), captured by the workflow's event stream.
pub fn run_events(ns: &str, workflow: &str, execution: &str) -> String {
    format!("{ns}.wf.{workflow}.events.{execution}")
}

/// `{ns}.wf.{workflow}.events.>`: every internal event of `workflow`.
pub fn run_events_all(ns: &str, workflow: &str) -> String {
    format!("{ns}.wf.{workflow}.events.>")
}

/// `{ns}.wf.{workflow}.history.{execution}`: the history of one run (every event applied
/// to it), captured by the namespace's history stream, which keeps it for the retention.
pub fn run_history(ns: &str, workflow: &str, execution: &str) -> String {
    format!("{ns}.wf.{workflow}.history.{execution}")
}

/// `{ns}.wf.*.history.>`: the history of every run of every workflow (the history
/// stream's subjects).
pub fn run_history_all(ns: &str) -> String {
    format!("{ns}.wf.*.history.>")
}

/// `{ns}.wf.*.history.{execution}`: the history of run `execution`, whatever its workflow
/// (a filter for reading it when only the execution id is known).
pub fn run_history_any(ns: &str, execution: &str) -> String {
    format!("{ns}.wf.*.history.{execution}")
}

/// The object-store bucket for artifacts (large inputs and outputs): `{ns}_artifacts`, with
/// the namespace's dots turned into `_`.
pub fn artifact_bucket(ns: &str) -> String {
    format!("{}_artifacts", ns.replace('.', "_"))
}

/// `{ns}.a2a.v1.artifact.get`: a request for one object of the artifact bucket by its name
/// (`docs/protocol.md`, "Reading an artifact"), answered by a workflow node. Callers and
/// agents read artifacts only this way under the shipped permissions: JetStream's own API
/// takes wildcards in the subjects that name an object, so a permission cannot confine it
/// to one object.
pub fn artifact_get(ns: &str) -> String {
    format!("{ns}.a2a.v1.artifact.get")
}

/// `{ns}_wf_cards` (dots as `_`): the object store bucket where a workflow node keeps card
/// contents too large for a card (as long as the cards that refer to them).
pub fn cards_bucket(ns: &str) -> String {
    format!("{}_wf_cards", ns.replace('.', "_"))
}

/// `$KV.{bucket}.{key}`: the subject a JetStream KV bucket stores `key` under. Publishing
/// to it (through JetStream, for the ack) writes the key, which lets a writer pipeline
/// writes or add headers (TTL, purge, expected sequence) the KV API does not expose.
pub fn kv_key(bucket: &str, key: &str) -> String {
    format!("$KV.{bucket}.{key}")
}

/// `$KV.{bucket}.>`: every write to a KV bucket (subscribe to watch them all).
pub fn kv_all(bucket: &str) -> String {
    kv_key(bucket, ">")
}

/// Why a subject may not receive a reply or status update.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reply subject '{subject}' is refused: {why}")]
pub struct ReplySubjectError {
    /// The subject, as given.
    pub subject: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Checks a subject a request asks to be answered on (its NATS reply, `Mesh-Reply-To` or
/// `Mesh-Status-To`): at most [`MAX_SUBJECT_LEN`] bytes of tokens of printable ASCII
/// (`!`…`~`, no `*` or `>` anywhere in a token), and only an inbox (a first token starting
/// with `_INBOX`, as clients make them, private prefixes like `_INBOX_alice` included) or a
/// mesh response or status subject of namespace `ns` (where a calling workflow's node takes
/// its calls' answers). Never a system subject (`$KV…`, `$JS…`, `$SYS…`), a workflow's
/// internal events or any other subject a requester could make a responder publish to.
pub fn check_reply(ns: &str, subject: &str) -> Result<(), ReplySubjectError> {
    let refuse = |why| {
        Err(ReplySubjectError {
            subject: shortened(subject),
            why,
        })
    };
    if subject.len() > MAX_SUBJECT_LEN {
        return refuse("it is longer than 256 bytes");
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    if subject.is_empty() || tokens.iter().any(|t| t.is_empty()) {
        return refuse("it is empty or has an empty token");
    }
    if tokens
        .iter()
        .any(|t| t.chars().any(|c| c == '*' || c == '>'))
    {
        return refuse("it has a wildcard");
    }
    if tokens
        .iter()
        .any(|t| t.chars().any(|c| !c.is_ascii_graphic()))
    {
        return refuse("it has a space, a control character or a character that is not ASCII");
    }
    if tokens[0].starts_with('$') {
        return refuse("it is a system subject ($…)");
    }
    if tokens[0].starts_with("_INBOX") {
        return if tokens.len() >= 2 {
            Ok(())
        } else {
            refuse("an inbox needs a token after its prefix")
        };
    }
    for kind in ["response", "status"] {
        let prefix = format!("{ns}.a2a.v1.agent.{kind}.");
        if let Some(rest) = subject.strip_prefix(&prefix) {
            return if rest.split('.').count() >= 2 {
                Ok(())
            } else {
                refuse("a mesh response or status subject names a caller and a task")
            };
        }
    }
    refuse("only inboxes (_INBOX…) and the mesh's response and status subjects may be answered on")
}

/// At most the first 64 bytes of `subject`, marked when cut: a refusal names the subject
/// it refuses without carrying all of it.
fn shortened(subject: &str) -> String {
    match subject.len() {
        0..=64 => subject.to_owned(),
        n => format!("{} ({n} bytes)", crate::inbound::excerpt(subject, 64)),
    }
}

/// Where a request asks to be answered, as it came: its NATS reply subject and its
/// `Mesh-Reply-To` and `Mesh-Status-To` headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnswerTo<'a> {
    /// The NATS reply subject of the request message.
    pub nats_reply: Option<&'a str>,
    /// The `Mesh-Reply-To` header.
    pub reply_to: Option<&'a str>,
    /// The `Mesh-Status-To` header.
    pub status_to: Option<&'a str>,
}

impl<'a> AnswerTo<'a> {
    /// Checks every subject the request names with [`check_reply`]. On a refusal: the first
    /// one, and where it may itself be answered (the NATS reply, when that one passes;
    /// else nowhere: nothing is published to a refused subject).
    pub fn screen(&self, ns: &str) -> Result<(), (ReplySubjectError, Option<&'a str>)> {
        let asked = [self.nats_reply, self.reply_to, self.status_to];
        let Some(refusal) = asked
            .iter()
            .flatten()
            .find_map(|s| check_reply(ns, s).err())
        else {
            return Ok(());
        };
        let answer_to = self.nats_reply.filter(|r| check_reply(ns, r).is_ok());
        Err((refusal, answer_to))
    }
}

/// The last token of a subject (the sub-task id of a response or status subject).
pub fn last_token(subject: &str) -> &str {
    subject.rsplit('.').next().unwrap_or(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_have_the_documented_shape() {
        assert_eq!(agent_cards("mesh"), "mesh.a2a.v1.discovery.agentcards");
        assert_eq!(discovery_all("mesh"), "mesh.a2a.v1.discovery.>");
        assert_eq!(
            agent_request("mesh", "Calc"),
            "mesh.a2a.v1.agent.request.Calc"
        );
        assert_eq!(
            agent_response("mesh", "Wf", "wf_1_a_1"),
            "mesh.a2a.v1.agent.response.Wf.wf_1_a_1"
        );
        assert_eq!(
            agent_status("acme.prod", "Wf", "x"),
            "acme.prod.a2a.v1.agent.status.Wf.x"
        );
        assert_eq!(
            agent_response_all("mesh", "Wf"),
            "mesh.a2a.v1.agent.response.Wf.>"
        );
        assert_eq!(
            agent_status_all("mesh", "Wf"),
            "mesh.a2a.v1.agent.status.Wf.>"
        );
        assert_eq!(last_token("mesh.a2a.v1.agent.response.Wf.abc"), "abc");
        assert_eq!(discovery_ping("mesh"), "mesh.a2a.v1.discovery.ping");
        assert_eq!(agent_cancel("mesh", "A"), "mesh.a2a.v1.agent.cancel.A");
        assert_eq!(approvals("mesh", "Wf"), "mesh.a2a.v1.approval.Wf");
        assert_eq!(run_events("mesh", "Wf", "e1"), "mesh.wf.Wf.events.e1");
        assert_eq!(run_events_all("mesh", "Wf"), "mesh.wf.Wf.events.>");
        assert_eq!(run_history("mesh", "Wf", "e1"), "mesh.wf.Wf.history.e1");
        assert_eq!(run_history_all("mesh"), "mesh.wf.*.history.>");
        assert_eq!(run_history_any("mesh", "e1"), "mesh.wf.*.history.e1");
        assert_eq!(artifact_bucket("acme.prod"), "acme_prod_artifacts");
        assert_eq!(kv_key("b", "Wf.e1.final"), "$KV.b.Wf.e1.final");
        assert_eq!(kv_all("b"), "$KV.b.>");
    }

    #[test]
    fn only_inboxes_and_mesh_responses_may_be_answered_on() {
        for ok in [
            "_INBOX.abc",
            "_INBOX_alice.x.y",
            "mesh.a2a.v1.agent.response.Wf.e1_n_0_1-ab",
            "mesh.a2a.v1.agent.status.Wf.t1",
        ] {
            assert_eq!(check_reply("mesh", ok), Ok(()), "{ok}");
        }
        for bad in [
            "$KV.mesh_wf_runs.Wf.e1",
            "$JS.API.STREAM.DELETE.mesh_WF_Wf",
            "$SYS.REQ.SERVER.PING",
            "mesh.wf.Wf.events.e1",
            "mesh.a2a.v1.agent.request.Other",
            "mesh.a2a.v1.agent.response.Wf",
            "other.a2a.v1.agent.response.Wf.t",
            "_INBOX",
            "_INBOX.>",
            "_INBOX.a b",
            "_INBOX.a*b",
            "_INBOX.é",
            &format!("_INBOX.{}", "x".repeat(5000)),
            "a..b",
            "",
        ] {
            let e = check_reply("mesh", bad).expect_err(bad);
            assert!(e.to_string().contains("is refused"), "{e}");
        }
    }

    #[test]
    fn tokens_are_validated() {
        assert_eq!(validate_token("Order_Workflow-2"), Ok(()));
        assert_eq!(validate_token(""), Err(SubjectError::Empty));
        for bad in ["a.b", "a*", ">", "a b", "é"] {
            assert!(validate_token(bad).is_err(), "{bad}");
        }
        assert!(validate_namespace("acme.prod").is_ok());
        assert!(validate_namespace("acme..prod").is_err());
        assert_eq!(validate_token(&"a".repeat(MAX_TOKEN_LEN)), Ok(()));
        assert_eq!(
            validate_token(&"a".repeat(MAX_TOKEN_LEN + 1)),
            Err(SubjectError::TooLong { len: 129 })
        );
    }

    #[test]
    fn a_long_subject_is_refused_before_use_and_named_briefly() {
        let long = format!("_INBOX.{}", "x".repeat(5000));
        let e = check_reply("mesh", &long).unwrap_err();
        assert!(e.to_string().len() < 200, "{e}");
        assert!(e.to_string().contains("longer than 256 bytes"), "{e}");
        let asked = AnswerTo {
            nats_reply: Some("_INBOX.ok"),
            reply_to: None,
            status_to: Some(&long),
        };
        let (refusal, answer_to) = asked.screen("mesh").unwrap_err();
        assert_eq!(refusal, e);
        assert_eq!(answer_to, Some("_INBOX.ok"));
        let asked = AnswerTo {
            nats_reply: Some(&long),
            ..AnswerTo::default()
        };
        assert_eq!(asked.screen("mesh").unwrap_err().1, None);
    }
}
