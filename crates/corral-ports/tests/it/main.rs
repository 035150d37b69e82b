//! corral-ports' integration tests: the in-memory implementations of the ports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod runs;
