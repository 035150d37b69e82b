//! corral-lab's integration tests: one binary, a module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod attacks;
mod inspect;
mod recorded;
mod reference;
mod replay_access;
mod scenarios;
mod score;
mod shadow;
mod support;
mod synthetic;
mod tournament;
mod tournaments;
mod verdict;
mod worked_example;
mod workers;
mod workflows;
