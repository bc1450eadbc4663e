//! What a node shares with the rest of the mesh: agent cards (ours, published; others',
//! kept), the deployment's seal, the object store, and the setup of buckets.
//!
//! - `registry`: agent cards seen on the mesh, and publishing our own.
//! - `seal`: the deployment's secret: call tokens and event MACs.
//! - `artifacts`: the mesh's artifact bucket and the card contents bucket.
//! - `artifact_reads`: serving reads of one artifact by its name to callers and agents.
//! - `setup`: buckets made or found, each step tried again while a cluster settles.

pub(in crate::shell) mod artifact_reads;
pub(in crate::shell) mod artifacts;
pub(in crate::shell) mod registry;
pub mod seal;
pub(in crate::shell) mod setup;
