//! The gateway's parts where they live: the per-(principal, op) limiter.

mod limiter;
