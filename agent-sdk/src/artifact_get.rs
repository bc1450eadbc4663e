//! Reading one artifact through a workflow node: a request on `{ns}.a2a.v1.artifact.get`
//! naming the object, answered with its bytes in parts (`docs/protocol.md`, "Reading an
//! artifact"). This is how callers and agents read under the shipped permissions: the
//! JetStream API subjects that name one object also take wildcards (`…M.*`, a consumer
//! filtered on `…C.*`), so no permission confines them to the objects one was handed, and
//! readers get none of them. The node reads only its artifact bucket, by the exact name.

use std::time::Duration;

use async_nats::{Client, Message, StatusCode};
use futures::StreamExt;
use messages::headers;

use crate::artifacts::ObjectRead;
use crate::error::ArtifactError;

/// How long each part of an answer may take to arrive.
const PART_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads object `name` of `bucket` (namespace `ns`'s artifact bucket) through a workflow
/// node, at most `cap` bytes. `None` when no node serves the namespace (then the caller
/// reads from JetStream itself).
pub(crate) async fn read(
    client: &Client,
    ns: &str,
    bucket: &str,
    name: &str,
    cap: usize,
) -> Option<Result<ObjectRead, ArtifactError>> {
    let failed = |reason: String| ArtifactError::Read {
        bucket: bucket.to_owned(),
        name: name.to_owned(),
        reason,
    };
    let inbox = client.new_inbox();
    let mut answers = match client.subscribe(inbox.clone()).await {
        Ok(answers) => answers,
        Err(e) => return Some(Err(failed(e.to_string()))),
    };
    let subject = messages::subjects::artifact_get(ns);
    let asked = client
        .publish_with_reply(subject, inbox, name.to_owned().into())
        .await;
    if let Err(e) = asked {
        return Some(Err(failed(e.to_string())));
    }
    let mut parts = Parts::default();
    loop {
        let msg = match tokio::time::timeout(PART_TIMEOUT, answers.next()).await {
            Ok(Some(msg)) => msg,
            Ok(None) => return Some(Err(failed("the answer stopped".into()))),
            Err(_) => return Some(Err(failed("no workflow node answered in time".into()))),
        };
        if msg.status == Some(StatusCode::NO_RESPONDERS) {
            return None;
        }
        if let Some(kind) = header(&msg, headers::ARTIFACT_ERROR) {
            let why = String::from_utf8_lossy(&msg.payload).into_owned();
            return Some(Err(match kind.as_str() {
                "not-found" => ArtifactError::NotFound {
                    bucket: bucket.to_owned(),
                    name: name.to_owned(),
                },
                _ => failed(format!("{kind}: {why}")),
            }));
        }
        match parts.add(&msg, cap) {
            Ok(false) => {}
            Ok(true) => return Some(Ok(parts.done())),
            Err(Over(size)) if size > cap => {
                return Some(Err(ArtifactError::TooLarge {
                    bucket: bucket.to_owned(),
                    name: name.to_owned(),
                    size,
                    limit: cap,
                }))
            }
            Err(Over(_)) => return Some(Err(failed("parts out of order".into()))),
        }
    }
}

/// The parts received so far.
#[derive(Default)]
struct Parts {
    count: u64,
    received: u64,
    version: Option<u64>,
    mime: Option<String>,
    bytes: Vec<u8>,
}

/// Why a part is refused: the size the bytes would reach (over the cap), or 0 for a part
/// out of order or without its number.
struct Over(usize);

impl Parts {
    /// Adds part `msg`; whether it was the last.
    fn add(&mut self, msg: &Message, cap: usize) -> Result<bool, Over> {
        let (index, count) = header(msg, headers::ARTIFACT_PART)
            .as_deref()
            .and_then(parse_part)
            .ok_or(Over(0))?;
        if index != self.received + 1 || (self.received > 0 && count != self.count) {
            return Err(Over(0));
        }
        if index == 1 {
            self.version = header(msg, headers::ARTIFACT_VERSION).and_then(|v| v.parse().ok());
            self.mime = header(msg, headers::ARTIFACT_MIME);
        }
        let size = self.bytes.len() + msg.payload.len();
        if size > cap {
            return Err(Over(size));
        }
        self.bytes.extend_from_slice(&msg.payload);
        self.count = count;
        self.received = index;
        Ok(index == count)
    }

    fn done(self) -> ObjectRead {
        ObjectRead {
            version: self.version,
            mime: self
                .mime
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "application/octet-stream".into()),
            bytes: self.bytes,
        }
    }
}

/// Header `name` of `msg`, as text.
fn header(msg: &Message, name: &str) -> Option<String> {
    let value = msg.headers.as_ref()?.get(name)?;
    Some(value.as_str().to_owned())
}

/// `{index}/{count}`, both decimal, `1 <= index <= count`.
fn parse_part(text: &str) -> Option<(u64, u64)> {
    let (index, count) = text.split_once('/')?;
    let (index, count): (u64, u64) = (index.parse().ok()?, count.parse().ok()?);
    (index >= 1 && index <= count).then_some((index, count))
}

#[cfg(test)]
mod tests {
    use super::parse_part;

    #[test]
    fn part_numbers_are_index_over_count() {
        assert_eq!(parse_part("1/1"), Some((1, 1)));
        assert_eq!(parse_part("3/7"), Some((3, 7)));
        for bad in ["0/1", "2/1", "1", "a/b", "1/", "/1", "-1/2"] {
            assert_eq!(parse_part(bad), None, "{bad}");
        }
    }
}
