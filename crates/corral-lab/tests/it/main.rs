//! corral-lab's integration tests: one binary, a module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scenarios;
mod support;
mod worked_example;
mod workflows;
