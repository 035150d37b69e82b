//! corral-server's integration tests: one binary. Every test starts a real server on a TCP port
//! of 127.0.0.1 (`axum::serve` over `corral_server::app`) and talks to it with reqwest.
//!
//! PostgreSQL comes from `CORRAL_TEST_POSTGRES_URL` (start one with
//! `eval "$(scripts/postgres-test-server | tail -n1)"`); each PostgreSQL test works in a fresh
//! schema. `openssl` (for the RS256 keypair) and PostgreSQL are required under `CI=true`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agent_link;
mod agent_ops;
mod agents_api;
mod anthropic_sdk;
mod attack_z;
mod attack_z2;
mod audit;
mod bad_input;
mod claude;
mod codex;
mod common;
mod confirm_abuse;
mod escapes;
mod guard_confirm;
mod guard_fixture;
mod guard_order;
mod guard_replicas;
mod http_fetch;
mod jwt;
mod learning;
mod learning_apis;
mod learning_eval;
mod limits;
mod llm;
mod llm_messages;
mod llm_responses;
mod mcp;
mod metrics;
mod openai_sdk;
#[path = "../../../corral-store/tests/support/pg_schema.rs"]
mod pg;
mod protected;
mod recordings;
mod routes;
mod run_tokens;
mod sandbox;
mod scripted_llm;
mod shadows;
mod statuses;
mod ui;
