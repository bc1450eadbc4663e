//! What arrives on a workflow's subjects from its callers and its agents: requests
//! (start, get, approve), cancels, steering (pause, resume, retry), agents' status
//! updates, and the identity checks that decide who may do what.
//!
//! - `requests`: takes requests to each workflow, any replica.
//! - `start`: the one way a run starts (its input checked, its start published).
//! - `schedules`: schedules changed by operators, and a slot's work carried out.
//! - `trigger_start`: a trigger's event decided and its run started (messages, webhooks,
//!   replays).
//! - `dead_letters`: replaying a trigger's dead letter.
//! - `cancels`: cancels of runs, also from a calling workflow on the cancel subject.
//! - `steer`: pausing, resuming and retrying a run that exists.
//! - `signals`: signals into a running run, for its wait nodes.
//! - `statuses`: agents' status updates on a run's calls, forwarded to its callers.
//! - `identity`: who may decide an approval or cancel a run (NKey signatures).
//! - `early`: cancels that come before their run's start, kept briefly and a few per caller.
//! - `nonces`: each signed request accepted once (its nonce remembered).

pub(in crate::shell) mod cancels;
pub(in crate::shell) mod dead_letters;
pub(in crate::shell) mod early;
pub(in crate::shell) mod identity;
pub(in crate::shell) mod nonces;
pub(in crate::shell) mod requests;
pub(in crate::shell) mod schedules;
pub(in crate::shell) mod signals;
pub(in crate::shell) mod start;
pub mod statuses;
pub(in crate::shell) mod steer;
pub(in crate::shell) mod trigger_start;
