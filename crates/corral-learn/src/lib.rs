//! Corral's learning mode as a pure library (no HTTP, no SQL, no logging): the scenario
//! manifest, the answer matcher and guard, disclosure levels and hints, and activation.
//!
//! Spec 000 (learning sandbox mode), issue 16 items 3, 4 and 6. The LLM proxy in
//! corral-server wires it in; nothing here runs unless the server activates learning mode.
//!
//! # Wiring it (what the server does)
//!
//! ```no_run
//! use std::sync::Arc;
//! use corral_learn::{gate, guard, levels, manifest, watch};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Startup (`corral serve` only; every other entry point calls `gate::refuse_outside_serve`).
//! if gate::flag_from_env()? {
//!     let grace = gate::grace_from_env()?;
//!     let path = std::env::var_os(manifest::MANIFEST_ENV).unwrap_or_default();
//!     let clock: Arc<dyn watch::Clock> = Arc::new(watch::SystemClock);
//!     let watcher = watch::Watcher::open(path.as_ref(), grace, clock.clone());
//!     let missing = gate::missing(&gate::Facts {
//!         auth_configured: true, open_mode: false, manifest_valid: watcher.is_ok(),
//!         autonomy: corral_policy::AutonomyLevel::L2, audit_on: true,
//!     });
//!     // `missing` non-empty: refuse to start, printing each (and the manifest's error).
//!     let guard = guard::Guard::new(Arc::new(watcher?));
//!     let levels = levels::Levels::new(levels::DEFAULT_HINT_INTERVAL, clock);
//!
//!     // Per root response (non-partial, with text), the learner's turn state kept per turn:
//!     let learner = corral_policy::Principal::new("alice", &[]);
//!     let snapshot = guard.watcher().current();
//!     let m = snapshot.manifest();
//!     let default = levels::Level::new(m.default_disclosure).unwrap_or(levels::Level::ZERO);
//!     let level = levels.level(&learner, &m.scenario_id, default);
//!     let mut turn = guard::TurnState::new();
//!     let mut texts = vec!["The total lag is 5,100.".to_owned()];
//!     let checked = guard.check(level, &mut turn, &mut texts, false);
//!     // checked.outcome: Withheld { scenario_id, targets, .. } -> audit
//!     // `learning_answer_withheld`; checked.manifest_error -> log it and bump
//!     // `corral_learning_manifest_errors_total` (= guard.watcher().errors_total()).
//!     # let _ = checked;
//! }
//! # Ok(()) }
//! ```
//!
//! - [`manifest`]: contract v1, strict; errors name paths and kinds, never values.
//! - [`watch`]: the last good manifest, `stat()`-checked on every call, grace for values that
//!   left it, an error counter.
//! - [`matcher`]: one automaton over every form of every value.
//! - [`guard`]: the nudge, once per turn; tool calls untouched; the outcome for the audit.
//! - [`levels`]: levels per (subject, scenario), hints (human only, rate-limited, +1, max 3),
//!   the system-prompt line, the reserved `lab_coach` name. In memory: a restart reads everyone
//!   at the manifest's default.
//! - [`gate`]: the strict flag, the entry-point refusal, the preconditions.
//!
//! **Architecture invariant:** no value of a manifest reaches an error message, a `Debug`
//! output or an [`guard::Outcome`]: `Target` and `Value` print `<withheld>`.

pub mod gate;
pub mod guard;
pub mod levels;
pub mod manifest;
pub mod matcher;
pub mod watch;
