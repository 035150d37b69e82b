//! corral-store's integration tests: one binary, a real SQLite file and a real PostgreSQL server.
//!
//! PostgreSQL comes from `CORRAL_TEST_POSTGRES_URL` (start one with
//! `eval "$(scripts/postgres-test-server | tail -n1)"`); each test works in a fresh schema.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[macro_use]
mod agents;
mod common;
mod confirmations;
mod errors;
mod holds;
mod lab;
mod layering;
#[path = "../support/pg_schema.rs"]
mod pg_schema;
mod postgres;
mod recordings;
mod runs;
mod shadows;
mod sqlite;
mod tournaments;
mod ui_sessions;
mod writer;
