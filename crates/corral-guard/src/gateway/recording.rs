//! Recording a decided call (issue 15): who may ask for it, and the event written after the call
//! was decided and audited.
//!
//! A call is recorded when its caller's token says `record: true` (a run-scoped token), or when
//! it sends `X-Corral-Record: on` with the `operator` or `admin` role (anyone else is refused,
//! `recording.not_allowed`, and nothing runs); either way only with a run id
//! (`recording.header_invalid` without one). A call asked to be recorded by a gateway without a
//! recorder is refused (`recording.unavailable`): it is never answered as if recorded.
//!
//! The event holds the canonical arguments, the response (a stream: its type and length only),
//! the refusal's or error's code, the attestation and the timings. It is written after the
//! call's audit event, so a recording failure cannot change the answer: it is logged without
//! values and the recording is marked `gapped`.

use corral_policy::{Role, codes};
use serde_json::json;

use super::{Call, CallOptions, Gateway, Refusal, Reply, now_ms};
use crate::audit::{AuditEvent, Outcome};
use crate::canonical::canonical;
use crate::recording::{Recorded, RecordedCall, RecordingKey};

impl Gateway {
    /// `Ok(true)` when the call is to be recorded, `Ok(false)` when not, or how it is refused.
    pub(super) fn recording_wanted(
        &self,
        call: &Call,
        opts: &CallOptions,
    ) -> Result<bool, (Outcome, Refusal)> {
        if opts.record && !call.caller.record {
            let role = Role::highest_of(&call.caller.principal.roles);
            if role.is_none_or(|r| r < Role::Operator) {
                return Err((
                    Outcome::RbacDenied,
                    Refusal::new(
                        codes::RECORDING_NOT_ALLOWED,
                        "`X-Corral-Record: on` needs the role `operator` or `admin`, and you have \
                         neither; drop the header, or ask for a run-scoped token with \
                         `record: true`",
                    ),
                ));
            }
        }
        let wanted = opts.record || call.caller.record;
        if !wanted {
            return Ok(false);
        }
        if opts.run_id.is_none() {
            return Err((
                Outcome::InvalidArgs,
                Refusal::new(
                    codes::RECORDING_HEADER_INVALID,
                    "`X-Corral-Record: on` records a run, and the call names none; send \
                     `X-Corral-Run: <id>` with it",
                ),
            ));
        }
        if self.recorder.is_none() {
            return Err((
                Outcome::Denied,
                Refusal::new(
                    codes::RECORDING_UNAVAILABLE,
                    "the call asked to be recorded and this corral keeps no recordings (no \
                     store), so it was not run; drop `X-Corral-Record`, or call the server",
                ),
            ));
        }
        Ok(true)
    }

    /// The key of the recording a call of `run_id` goes to.
    fn recording_key(&self, call: &Call, run_id: &str, tenant: &str) -> RecordingKey {
        RecordingKey {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            // The full identity owns the recording: a JWT `sub: bot` is not the token `bot`.
            identity: call.caller.principal.identity(),
            principal: call.caller.principal.id.clone(),
            purpose: self.purpose,
        }
    }

    /// `Ok(true)` when the recorder can take the call's event (the tenant may keep its
    /// recording), else the refusal: a call marked for recording never runs unrecorded.
    pub(super) async fn admit_recording(
        &self,
        call: &Call,
        run_id: &str,
        tenant: &str,
    ) -> Result<bool, (Outcome, Refusal)> {
        let Some(recorder) = &self.recorder else {
            return Ok(false);
        };
        let key = self.recording_key(call, run_id, tenant);
        match recorder.admit(&key, now_ms()).await {
            Ok(()) => Ok(true),
            Err(e) => {
                let outcome = if e.code == codes::RECORDING_LIMIT {
                    Outcome::Limited
                } else {
                    Outcome::Denied
                };
                Err((outcome, Refusal::new(e.code, e.message)))
            }
        }
    }

    /// The recording event of a decided call (built before any await: a reply holding a stream
    /// is not `Sync`).
    pub(super) fn recorded_call(
        &self,
        call: &Call,
        run_id: &str,
        event: &AuditEvent,
        reply: &Reply,
    ) -> (RecordingKey, RecordedCall) {
        let key = self.recording_key(call, run_id, &event.tenant);
        let (response, error_code) = match reply {
            Reply::Json(v) => (Some(v.clone()), None),
            // A stream's bytes are not kept: what it was, not what it held.
            Reply::Stream(s) => (
                Some(json!({"stream": {"content_type": s.content_type, "bytes": s.len}})),
                None,
            ),
            Reply::Refused(r) => (None, Some(r.code.to_owned())),
        };
        let recorded = RecordedCall {
            op: event.op.clone(),
            args: canonical(&call.args),
            response,
            error_code,
            attestation: event.attestation.clone(),
            started_ms: event.ts_ms,
            duration_us: event.duration_us,
        };
        (key, recorded)
    }

    /// Writes a decided call to its run's recording; a failure is logged (value-free) and the
    /// recording marked `gapped`.
    pub(super) async fn write_recording(
        &self,
        request_id: &str,
        key: RecordingKey,
        recorded: RecordedCall,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let now = now_ms();
        match recorder.record(&key, &recorded, now).await {
            Ok(Recorded::Stored { .. } | Recorded::Queued) => {}
            Ok(Recorded::Capped) => tracing::warn!(
                tenant = %key.tenant,
                run = %key.run_id,
                request_id,
                "the recording reached its size cap; this call and later ones are not recorded"
            ),
            Err(e) => {
                // The error names codes and ids, never a value of the call.
                tracing::warn!(
                    tenant = %key.tenant,
                    run = %key.run_id,
                    request_id,
                    error = %e,
                    "a call could not be recorded; the recording is marked gapped"
                );
                if let Err(e) = recorder.mark_gapped(&key, now).await {
                    tracing::warn!(
                        tenant = %key.tenant,
                        run = %key.run_id,
                        error = %e,
                        "the recording could not be marked gapped"
                    );
                }
            }
        }
    }
}
