//! The runtime composed from a config: what each set of options starts, and reloads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod build;
