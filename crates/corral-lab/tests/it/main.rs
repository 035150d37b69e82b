//! corral-lab's integration tests: one binary, a module per concern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod inspect;
mod reference;
mod score;
mod synthetic;
mod verdict;
