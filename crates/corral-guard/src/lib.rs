//! The guard chain: one call path for every surface (HTTP, MCP, `corral call --local`, the lab),
//! and the ports it writes through (`AuditSink`).

pub mod args;
pub mod audit;
pub mod gateway;
pub mod limiter;
pub mod metrics;

pub use gateway::{Call, Caller, Deployment, Gateway, Refusal, Reply};
