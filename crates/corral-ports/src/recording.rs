//! Recordings (issue 15): the ordered call timeline of a run marked for recording, and the
//! `Recorder` port the guard chain writes it through (corral-store implements it).
//!
//! Unlike the audit, a recording holds values (the canonical arguments and the response), so
//! reading one needs the `admin` role or the run's own principal. A recording belongs to one
//! (tenant, run id, principal identity): two principals recording under the same run id get two
//! recordings, so neither can capture, hide or read the other's calls. Its events are numbered
//! from 1 without gaps in the order they were written. A recording that reached its size cap is marked
//! `capped` and takes no more events; one whose event could not be written is marked `gapped`.
//! Either way the recording says so: it is never silently truncated.

use futures_core::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::audit::AttestationRecord;
use crate::runs::RunPurpose;

/// The run a recorded call belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingKey {
    /// The tenant.
    pub tenant: String,
    /// The run id (`X-Corral-Run`, or the token's run).
    pub run_id: String,
    /// The principal whose calls the run holds: its full identity (`Principal::identity()`,
    /// e.g. `token:service:bot`), which owns the recording.
    pub identity: String,
    /// The principal's id, for display (`bot`); never compared for access.
    pub principal: String,
    /// The run's purpose.
    pub purpose: RunPurpose,
}

/// One decided call, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The op id.
    pub op: String,
    /// The arguments, as canonical JSON text (`corral_guard::canonical`).
    pub args: String,
    /// The op's response; `None` for a refusal, an error, or a stream (metadata only).
    pub response: Option<serde_json::Value>,
    /// The stable code of a refusal or an op error; `None` when the call succeeded.
    pub error_code: Option<String>,
    /// What the isolation backend applied, when the op ran in one.
    pub attestation: Option<AttestationRecord>,
    /// When the call arrived (ms since the epoch).
    pub started_ms: i64,
    /// How long it took, in microseconds.
    pub duration_us: i64,
}

impl RecordedCall {
    /// The bytes the event takes against a recording's size cap: its op, arguments, response,
    /// error code and attestation as stored text.
    pub fn stored_bytes(&self) -> u64 {
        let n = self.op.len()
            + self.args.len()
            + self.response.as_ref().map_or(0, json_len)
            + self.error_code.as_deref().map_or(0, str::len)
            + self.attestation.as_ref().map_or(0, json_len);
        u64::try_from(n).unwrap_or(u64::MAX)
    }
}

/// The length of a value's JSON text.
fn json_len<T: Serialize>(v: &T) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// What became of a recorded call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Stored as event `seq` (from 1).
    Stored {
        /// Its place in the run's timeline.
        seq: u64,
    },
    /// Not stored: the recording reached its size cap (or had already), and is marked `capped`.
    Capped,
    /// Queued for the recording writer, which commits it with others (`seq` is assigned there,
    /// in queue order); a batch that cannot be written marks its recordings `gapped`.
    Queued,
}

/// Why a call marked for recording may not run: it could not be recorded (the tenant's limit of
/// recordings, the store down), and a recorded run never loses a call silently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AdmitRefusal {
    /// The stable code (`recording.limit`, `store.unavailable`, ...).
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// A recorder failed; the call's answer is unchanged, the failure is logged (value-free) and the
/// recording marked `gapped`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("recorder: {0}")]
pub struct RecorderError(pub String);

/// Where recordings are kept.
pub trait Recorder: Send + Sync + std::fmt::Debug {
    /// Before a call marked for recording runs: `Ok` when its event can be recorded (its
    /// recording exists, or the tenant may start one more), else why not; the call is then
    /// refused, never run unrecorded.
    fn admit<'a>(
        &'a self,
        key: &'a RecordingKey,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), AdmitRefusal>>;

    /// Appends `call` to the recording of `key` (creating it at its first call), unless that
    /// would pass the recording's cap: then it stores nothing and marks the recording `capped`.
    fn record<'a>(
        &'a self,
        key: &'a RecordingKey,
        call: &'a RecordedCall,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Recorded, RecorderError>>;

    /// Marks the recording of `key` `gapped` (creating it if needed): an event of it could not
    /// be written, so its timeline has a hole.
    fn mark_gapped<'a>(
        &'a self,
        key: &'a RecordingKey,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), RecorderError>>;
}
