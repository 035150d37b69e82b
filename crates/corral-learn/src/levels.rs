//! Disclosure levels and hints: a level 0..=3 per (subject, scenario id), raised only by a
//! verified human's hint.
//!
//! A subject is `Principal::identity()`, which a human and an agent acting for them (a
//! delegated principal) share: the agent acts at its human's level and cannot raise it (only a
//! `Human` principal takes a hint). A level recorded for another scenario reads as the default,
//! and the first hint in a new scenario starts from the default. Hints are rate-limited per
//! subject ([`Levels::new`]'s interval, 10 s by default), add 1, never lower, and stop at 3.
//!
//! Levels live in process memory only: a restart reads every learner at the manifest's
//! default, which only ever withholds more (fails safe). One entry per subject that took a
//! hint; subjects are authenticated principals, so the table is bounded by the deployment's
//! learners.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_policy::codes;
use corral_policy::{Principal, PrincipalKind, PrincipalOrigin};

use crate::watch::Clock;

/// The reserved name of the coach agent; no declarative agent may take it.
pub const LAB_COACH: &str = "lab_coach";
/// The root agent's name when none is configured.
pub const DEFAULT_ROOT_AGENT: &str = "root";
/// The default time between two hints of one subject.
pub const DEFAULT_HINT_INTERVAL: Duration = Duration::from_secs(10);

/// A disclosure level, 0..=3; 3 shows everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level(u8);

impl Level {
    /// Level 0: nothing is disclosed.
    pub const ZERO: Level = Level(0);
    /// Level 3: unguarded.
    pub const MAX: Level = Level(3);

    /// The level `n`, if it is one.
    pub fn new(n: u8) -> Option<Level> {
        (n <= 3).then_some(Level(n))
    }

    /// Its number.
    pub fn get(self) -> u8 {
        self.0
    }

    /// Whether answers are shown at this level (3).
    pub fn is_unguarded(self) -> bool {
        self.0 >= 3
    }

    fn next(self) -> Level {
        Level((self.0 + 1).min(3))
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The line appended to the root's and the coach's system prompt at `level`. It never holds a
/// value (it is a constant per level).
pub fn level_line(level: Level) -> &'static str {
    match level.0 {
        0 => {
            "Learning mode: the learner is at disclosure level 0 of 3. Do not state the exercise's answers; ask what they would check first."
        }
        1 => {
            "Learning mode: the learner is at disclosure level 1 of 3. Do not state the exercise's answers; name the data source that holds each answer."
        }
        2 => {
            "Learning mode: the learner is at disclosure level 2 of 3. Do not state the exercise's answers; walk them to the last step and let them take it."
        }
        _ => {
            "Learning mode: the learner is at disclosure level 3 of 3. You may state the exercise's answers and explain how they were found."
        }
    }
}

/// A hint that raised a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// The level before.
    pub old: Level,
    /// The level now.
    pub new: Level,
}

/// Why a hint was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintRefusal {
    /// The caller is not a verified human.
    NotHuman,
    /// The level is already 3.
    AtMax,
    /// The subject's last hint was too recent.
    RateLimited {
        /// How long until the next one is taken.
        retry_after: Duration,
    },
}

impl HintRefusal {
    /// Its catalog code.
    pub fn code(&self) -> &'static str {
        match self {
            HintRefusal::NotHuman => codes::LEARNING_HINT_NOT_HUMAN,
            HintRefusal::AtMax => codes::LEARNING_HINT_AT_MAX,
            HintRefusal::RateLimited { .. } => codes::LEARNING_HINT_RATE_LIMITED,
        }
    }
}

impl fmt::Display for HintRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HintRefusal::NotHuman => f.write_str(
                "only a verified human may take a hint (this caller is an agent, a service or anonymous); press the hint button with the learner's own token",
            ),
            HintRefusal::AtMax => {
                f.write_str("the level is already 3, the highest; every answer is shown")
            }
            HintRefusal::RateLimited { retry_after } => write!(
                f,
                "the last hint was too recent; ask again in {} s",
                retry_after.as_secs().max(1)
            ),
        }
    }
}

impl std::error::Error for HintRefusal {}

/// What `GET /me`'s learning block shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearnerView {
    /// The level now.
    pub level: Level,
    /// Always 3.
    pub max_level: Level,
    /// Whether a hint would be taken now (below 3, not rate-limited, a human).
    pub can_take_hint: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    scenario_id: String,
    level: Level,
    last_hint: Option<Instant>,
}

/// The level table, in process memory.
#[derive(Debug)]
pub struct Levels {
    entries: Mutex<HashMap<String, Entry>>,
    interval: Duration,
    clock: Arc<dyn Clock>,
}

/// The subject a principal's level is kept under (a human and their delegated agent share it).
pub fn subject(principal: &Principal) -> String {
    principal.identity()
}

impl Levels {
    /// An empty table; hints of one subject at least `interval` apart.
    pub fn new(interval: Duration, clock: Arc<dyn Clock>) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            interval,
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The level of `principal` in `scenario_id`; `default` when none is recorded for it.
    pub fn level(&self, principal: &Principal, scenario_id: &str, default: Level) -> Level {
        if !principal.authenticated {
            return default;
        }
        let entries = self.lock();
        match entries.get(&subject(principal)) {
            Some(e) if e.scenario_id == scenario_id => e.level.max(default),
            Some(_) | None => default,
        }
    }

    /// What `GET /me` shows for `principal`.
    pub fn view(&self, principal: &Principal, scenario_id: &str, default: Level) -> LearnerView {
        let level = self.level(principal, scenario_id, default);
        let rate_ok = self.lock().get(&subject(principal)).is_none_or(|e| {
            e.last_hint
                .is_none_or(|t| self.clock.now().saturating_duration_since(t) >= self.interval)
        });
        LearnerView {
            level,
            max_level: Level::MAX,
            can_take_hint: is_human(principal) && !level.is_unguarded() && rate_ok,
        }
    }

    /// Raises `principal`'s level in `scenario_id` by one.
    pub fn hint(
        &self,
        principal: &Principal,
        scenario_id: &str,
        default: Level,
    ) -> Result<Hint, HintRefusal> {
        if !is_human(principal) {
            return Err(HintRefusal::NotHuman);
        }
        let now = self.clock.now();
        let mut entries = self.lock();
        let key = subject(principal);
        let (old, last_hint) = match entries.get(&key) {
            Some(e) if e.scenario_id == scenario_id => (e.level.max(default), e.last_hint),
            Some(e) => (default, e.last_hint),
            None => (default, None),
        };
        if old.is_unguarded() {
            return Err(HintRefusal::AtMax);
        }
        if let Some(t) = last_hint {
            let since = now.saturating_duration_since(t);
            if since < self.interval {
                return Err(HintRefusal::RateLimited {
                    retry_after: self.interval - since,
                });
            }
        }
        let new = old.next();
        entries.insert(
            key,
            Entry {
                scenario_id: scenario_id.to_owned(),
                level: new,
                last_hint: Some(now),
            },
        );
        Ok(Hint { old, new })
    }
}

/// A verified human: authenticated by a credential (a static token or a JWT), of kind human.
fn is_human(principal: &Principal) -> bool {
    let verified = matches!(
        principal.origin,
        PrincipalOrigin::StaticToken | PrincipalOrigin::Jwt { .. }
    );
    principal.authenticated && verified && principal.kind == PrincipalKind::Human
}
