//! corral-learn tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod guard;
mod manifest;
mod matcher;
mod watch;
