//! The ports the guard chain writes through and storage implements: audit events and their sink
//! (`AuditSink`), run records and budgets (`RunStore`), pending actions (`ConfirmationStore`),
//! with their plain data types and the in-memory implementations (`RunLedger`,
//! `MemoryConfirmations`, the JSON-lines sink), and the recordings of runs marked for recording
//! (`Recorder`), and an agent session's held writes as plain data (`holds`). A crate of its own so
//! corral-store implements
//! the ports without linking the guard or the sandbox crate (corral-exec, the one with `unsafe`).

pub mod attestation;
pub mod audit;
pub mod confirm;
pub mod holds;
pub mod metering;
pub mod recording;
pub mod runs;
