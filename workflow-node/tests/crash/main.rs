//! Crashes and upgrades with real processes: replicas of `workflow-node serve` killed
//! (SIGKILL, SIGTERM, a lost cluster node) under load, and rolling upgrades between versions.
//! They load the machine and bound their runs in time, so each crash test holds it alone
//! (`support::process::alone`) and the upgrade tests share it only with each other
//! (`shared`): as when each file was a binary of its own, run one after another.

#[path = "../support/mod.rs"]
mod support;

mod agent_limits;
mod agents_twice;
mod cluster;
mod faults;
mod flow;
mod history_loss;
mod kill;
mod lost_calls;
mod partitions;
mod schedules;
mod signals;
mod sigterm;
mod skew;
mod skew_minutes;
mod soak;
mod store_full;
mod timeouts;
mod triggers;
mod upgrade_processes;
