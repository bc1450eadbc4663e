//! The core's tests in one binary: scenarios on the simulator, properties over random
//! workflows (runs, steering, defaults) and fuzzing of what the node reads back from NATS.
//! None touches a network: they are pure and CPU-bound.

#[path = "../support/mod.rs"]
mod support;

mod defaults_properties;
mod fuzz_events;
mod properties;
mod scenarios;
mod steer_properties;
