//! The shipped examples run as written: the example agents, the Python caller and the
//! peer engines' scripts.

#[path = "../support/mod.rs"]
mod support;

mod artifact_call;
mod peer_scripts;
mod python;
mod python_sdk;
mod tool_agent;
