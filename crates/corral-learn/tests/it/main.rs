//! corral-learn tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod gate;
mod guard;
mod hostile;
mod levels;
mod manifest;
mod matcher;
mod watch;
