//! The deterministic execution core: `apply(workflow, state, event, now) -> commands`.
//!
//! No I/O, no clock, no randomness: time comes in as [`Millis`], timers go out as
//! [`Command::StartTimer`] deadlines, and identical inputs give identical commands. The
//! shell loads an [`Execution`], applies one [`Event`], commits the new state with
//! compare-and-swap, and only then carries out the [`Command`]s.
//!
//! - `types`: events, commands, ids.
//! - `state`: what a run keeps (serialised into one KV entry).
//! - `engine`: readiness, node ends, stopping, the end of the run.
//! - `calls`: one agent call's life: queue, dispatch, timeout, retry with backoff.
//! - `agent_slots`: a call waiting for its agent's slot (flow control per agent).
//! - `kinds`: what each node type does when it starts and when its calls end.
//! - `pause`: pausing and resuming a run.
//! - `flow`: runs queued for a slot under the workflow's flow control.
//! - `signals`: the `wait` node, and the signals a run takes or keeps.
//! - `retry`: the state a retry of an ended run starts from.
//! - [`sim`]: a simulator with scripted agents on virtual time, for tests and benches.

mod agent_slots;
mod calls;
mod control;
mod engine;
mod flow;
mod kinds;
mod pause;
mod policy;
mod retry;
mod scope;
mod signals;
pub mod sim;
mod state;
#[cfg(test)]
mod testkit;
mod types;

pub use calls::{call_of, call_request, redispatch};
pub use engine::apply;
pub use flow::FlowTicket;
pub use kinds::TIMER_EARLY_TOLERANCE_MS;
pub use pause::Paused;
pub use retry::retry_state;
pub use signals::{
    keepable, refused_payload, Signal, Signals, MAX_KEPT_SIGNALS, MAX_KEPT_SIGNAL_BYTES,
};
pub use state::{
    AgentSlot, CallPhase, CallState, Detail, Execution, ForkState, MapState, NodeState, WaitState,
};
pub use types::{
    Command, Dispatch, Event, ExecutionId, Failure, FailureClass, Millis, NodeStatus, Progress,
    RunError, RunStatus, Slot, TaskKey, TimerId,
};
