//! The guard chain: one call path for every surface (HTTP, MCP, `corral call --local`, the lab),
//! and the ports it writes through (`AuditSink`, `ConfirmationStore` and `RunStore`, defined in
//! corral-ports and re-exported here; `CallObserver`).

pub mod args;
pub mod canonical;
pub mod explain;
pub mod gateway;
pub mod guardrails;
pub mod limiter;
pub mod metrics;

// The ports and their in-memory implementations live in corral-ports (so storage links neither
// this crate nor the sandbox); their paths under `corral_guard::` stay.
pub use corral_ports::{audit, confirm, metering, recording, runs};

pub use gateway::{
    Call, CallOptions, Caller, ConfirmationsPage, Deployment, Gateway, LIST_DEFAULT_LIMIT,
    LIST_MAX_LIMIT, Proxied, ProxiedOutcome, Refusal, Reply, SimulatedOps, now_ms, valid_run_id,
};
pub use metrics::{CallObserver, NoObserver};
