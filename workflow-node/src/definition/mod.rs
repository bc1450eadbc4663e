//! Workflow definitions: parse YAML or JSON into typed structs and validate them.
//!
//! [`load_file`] and [`parse_str`] report **all** problems at once as [`Problem`]s, each
//! naming the node and the field.

mod model;

pub use model::*;
