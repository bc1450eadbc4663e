//! The operations on a mesh's runs and definitions that every face shares (the CLI, the
//! web view, and the doors to come): each takes plain values (a connection, a namespace,
//! a run) and returns data or a typed [`refusal::Refusal`]. A face parses its arguments,
//! calls here and prints or answers; it maps a refusal's kind to its own words (an exit
//! code, an HTTP status), never its message.
//!
//! - [`refusal`]: why an operation did not happen, with the node's JSON-RPC code.
//! - [`runs`]: list, find, read and the history of runs.
//! - [`view`]: a run as data (the JSON every face shows).
//! - [`definition`]: the definition a run was made with.
//! - [`follow`]: one stream of a run's changes.
//! - [`schedules`]: the schedules and their next fire times, and changing one.
//! - [`steer`]: cancel, pause, resume, retry.
//! - [`triggers`]: the dead letters of event triggers, and replaying one.
//! - [`approvals`]: the gates waiting, and a decision on one.
//! - [`signals`]: a signal sent to a run's wait nodes.
//! - [`definitions`]: the stored definitions, and deleting one.
//! - [`ask`]: one request to a workflow's nodes, its answer as an outcome.
//! - [`call`]: a workflow or agent of the catalog called by name, for the doors.
//! - [`words`]: an agent's status text, shown as that agent's quoted words.
//! - [`waits`]: what a run waits for (approvals, timers, slots, a resume).
//! - [`trigger_view`]: the triggers of the served workflows, their lag and dead letters.

pub mod approvals;
pub mod ask;
pub mod call;
pub mod definition;
pub mod definitions;
pub mod follow;
pub mod refusal;
pub mod runs;
pub mod schedules;
pub mod signals;
pub mod steer;
pub mod trigger_view;
pub mod triggers;
pub mod view;
pub mod waits;
pub mod words;
