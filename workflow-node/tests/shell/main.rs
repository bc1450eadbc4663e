//! The shell's tests in one binary: each starts its own nats-server, stub agents and an
//! in-process workflow node (`support::mesh`), so they run side by side.

#[path = "../support/mod.rs"]
mod support;

mod agent_limits;
mod artifacts;
mod cards;
mod children;
mod e2e;
mod expressions;
mod flow;
mod group_commit;
mod history;
mod identity;
mod large_maps;
mod large_outputs;
mod limits;
mod payloads;
mod per_node;
mod policy;
mod record_format;
mod recovery;
mod replicas;
mod replies;
mod requests;
mod retention;
mod retry_versions;
mod schedules;
mod signals;
mod tools;
mod triggers;
mod trust;
mod versions;
mod wakes;
