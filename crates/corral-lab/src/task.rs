//! A recorded task (issue 15): the task input a recording kept (`Recording::input`: a lab run's
//! scenario steps, or what an orchestrator set for a live session), read back as the scenario
//! replays run against; and whether a recording's timeline can be put in order at all.
//!
//! A timeline that cannot be put in order (a write that failed: `gapped`; a cap that cut it:
//! `capped`; a `seq` missing, repeated or out of order; fewer events than the recording counts)
//! is [`Timeline::Degraded`] with its reason: a replay of it has zero steps and says why, never
//! a fabricated history.

use corral_policy::codes;
use corral_store::recording::RecordingEvent;
use serde_json::{Value, json};

use crate::scenario::Scenario;
use crate::service::{LabError, RecordingView};

/// The task a recorded run was given.
#[derive(Debug, Clone)]
pub struct RecordedTask {
    /// The recorded run's id.
    pub run_id: String,
    /// Its steps (the inputs, with expected values where kept), and no mocks.
    pub scenario: Scenario,
    /// The lab scenario it was a run of (id, version), when the input names one.
    pub from: Option<(String, i64)>,
}

impl RecordedTask {
    /// The task input of `view`'s recording: `{scenario?: {id, version, name}, steps: [{input,
    /// expected?}]}`. No input, or one of another shape, is `replay.no_input`.
    pub fn of(view: &RecordingView) -> Result<Self, LabError> {
        let run_id = view.recording.run_id.clone();
        let no_input = |why: String| {
            LabError::new(
                codes::REPLAY_NO_INPUT,
                format!(
                    "recording {run_id:?} {why}, so there is no task to re-run; record lab runs \
                     with `sandbox: {{record_runs: true}}`, or set a live session's input with \
                     `PUT /v1/sandbox/recordings/{{run}}/input` before replaying it"
                ),
            )
        };
        let Some(input) = &view.recording.input else {
            return Err(no_input("kept no task input".to_owned()));
        };
        let from = input.get("scenario").and_then(|s| {
            Some((
                s.get("id")?.as_str()?.to_owned(),
                s.get("version")?.as_i64()?,
            ))
        });
        let name = input
            .pointer("/scenario/name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("task of recording {run_id}"), str::to_owned);
        let steps = input.get("steps").cloned().unwrap_or(Value::Null);
        let scenario =
            Scenario::from_json(&json!({"name": name, "steps": steps})).map_err(|e| {
                no_input(format!(
                    "has a task input that is not `{{steps: [{{input, expected?}}]}}` ({})",
                    e.message
                ))
            })?;
        Ok(Self {
            run_id,
            scenario,
            from,
        })
    }
}

/// A recording's timeline, if it can be put in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Timeline<'a> {
    /// Every event, `seq` 1..=n, as the recording counts them.
    Ordered(&'a [RecordingEvent]),
    /// It cannot be: why.
    Degraded(String),
}

/// Whether `view`'s events form the whole, ordered timeline of its run.
pub fn timeline(view: &RecordingView) -> Timeline<'_> {
    let r = &view.recording;
    if r.gapped {
        return Timeline::Degraded(
            "the recording is gapped: an event of it could not be written, so its timeline has a hole"
                .to_owned(),
        );
    }
    if r.capped {
        return Timeline::Degraded(
            "the recording is capped: it reached its size cap and later calls were not kept"
                .to_owned(),
        );
    }
    for (i, e) in view.events.iter().enumerate() {
        let want = i as u64 + 1;
        if e.seq != want {
            return Timeline::Degraded(format!(
                "event {want} of the timeline is missing (found seq {} in its place)",
                e.seq
            ));
        }
    }
    if view.events.len() as u64 != r.events {
        return Timeline::Degraded(format!(
            "the recording counts {} events and {} can be read",
            r.events,
            view.events.len()
        ));
    }
    Timeline::Ordered(&view.events)
}
