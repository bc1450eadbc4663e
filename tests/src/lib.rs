//! Test harness: starts real nats-server processes for integration tests.
