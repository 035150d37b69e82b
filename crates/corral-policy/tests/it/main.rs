//! Integration tests for corral-policy: one test binary, one module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod agents;
mod catalog;
mod commands;
mod deny_beats_allow;
mod differential;
mod egress;
mod hooks_and_presets;
mod identity;
mod paths;
mod support;
