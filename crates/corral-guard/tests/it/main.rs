//! The gateway's parts where they live: the per-(principal, op) limiter, and the guard chain
//! driven directly over the mock backend and the memory stores.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod canonical_props;
mod exact_args;
mod gateway;
mod limiter;
mod recording;
mod replay_registry;
mod simulated;
