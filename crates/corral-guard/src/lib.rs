//! The guard chain: one call path for every surface (HTTP, MCP, `corral call --local`, the lab),
//! and the ports it writes through (`AuditSink`, `ConfirmationStore`, `CallObserver`).

pub mod args;
pub mod audit;
pub mod canonical;
pub mod confirm;
pub mod gateway;
pub mod guardrails;
pub mod limiter;
pub mod metrics;
pub mod runs;

pub use gateway::{
    Call, CallOptions, Caller, ConfirmationsPage, Deployment, Gateway, LIST_DEFAULT_LIMIT,
    LIST_MAX_LIMIT, Refusal, Reply, SimulatedOps, now_ms, valid_run_id,
};
pub use metrics::{CallObserver, NoObserver};
