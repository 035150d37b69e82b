//! The manifest watcher: the last good manifest, reloaded when the file changes, with a grace
//! period for values that leave it.
//!
//! [`Watcher::check`] takes `stat()` of the manifest path (device, inode, mtime, ctime, size;
//! symlinks followed) synchronously on every call, and reads the file again when the stamp
//! differs from the last one seen, so an atomic replace (temp file + rename) is in force on the
//! very next call: no polling interval leaves new values unguarded. (An in-place rewrite that
//! keeps the inode and the size within one tick of the file system's timestamps would look
//! unchanged: the seeder writes atomically, as the spec requires.) A reload that fails keeps
//! the last good manifest, increments [`Watcher::errors_total`] (exported by the server as
//! `corral_learning_manifest_errors_total`) once per failing version of the file, and hands the
//! error (paths and kinds only, never a value) to the caller to log.
//!
//! A value that leaves the manifest (the scenario id changed, or the lab re-seeded) stays
//! guarded for the grace period (`CORRAL_LEARNING_GRACE_SECONDS`, 3600 by default; read with
//! `gate::grace_from_env`), measured on an injectable [`Clock`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::manifest::{self, FileStamp, Manifest, ManifestError, Target};
use crate::matcher::{Matcher, MatcherError};

/// The grace period when none is configured: an hour.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

/// A monotonic clock (injected so tests can move time).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    offset_ms: AtomicU64,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at the current instant.
    pub fn new() -> Self {
        Self {
            base: Instant::now(),
            offset_ms: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// A target the guard withholds now: in the manifest, or graced after leaving it.
#[derive(Debug, Clone, PartialEq)]
pub struct Guarded {
    /// The scenario it belongs to (the current one, or the one it left).
    pub scenario_id: String,
    /// The target.
    pub target: Target,
    /// `None` while it is in the manifest; when its grace ends otherwise.
    pub until: Option<Instant>,
}

/// What the guard works from: a manifest, every guarded target, and their matcher.
#[derive(Debug)]
pub struct Snapshot {
    manifest: Arc<Manifest>,
    guarded: Vec<Guarded>,
    matcher: Matcher,
    expires: Option<Instant>,
}

impl Snapshot {
    /// A snapshot of `manifest` alone (no graced values).
    pub fn new(manifest: Manifest) -> Result<Self, MatcherError> {
        let guarded = in_force(&manifest);
        Self::build(Arc::new(manifest), guarded)
    }

    fn build(manifest: Arc<Manifest>, guarded: Vec<Guarded>) -> Result<Self, MatcherError> {
        let values: Vec<_> = guarded.iter().map(|g| g.target.value.clone()).collect();
        let matcher = Matcher::new(&values)?;
        let expires = guarded.iter().filter_map(|g| g.until).min();
        Ok(Self {
            manifest,
            guarded,
            matcher,
            expires,
        })
    }

    /// The manifest in force.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Every guarded target; the matcher's indices point into it.
    pub fn guarded(&self) -> &[Guarded] {
        &self.guarded
    }

    /// The matcher over every guarded target.
    pub fn matcher(&self) -> &Matcher {
        &self.matcher
    }
}

fn in_force(m: &Manifest) -> Vec<Guarded> {
    m.targets
        .iter()
        .map(|t| Guarded {
            scenario_id: m.scenario_id.clone(),
            target: t.clone(),
            until: None,
        })
        .collect()
}

/// The result of a check: the snapshot in force, and the error of a reload that just failed.
#[derive(Debug)]
pub struct Refresh {
    /// What to guard with.
    pub snapshot: Arc<Snapshot>,
    /// Set on the call that found a new version of the file invalid (to be logged: it holds
    /// paths and kinds only).
    pub error: Option<ManifestError>,
}

#[derive(Debug)]
struct State {
    /// The stamp of the version of the file last looked at, valid or not.
    seen: Option<FileStamp>,
    snapshot: Arc<Snapshot>,
}

/// Holds the last good manifest of a path.
#[derive(Debug)]
pub struct Watcher {
    path: PathBuf,
    grace: Duration,
    clock: Arc<dyn Clock>,
    errors: AtomicU64,
    state: Mutex<State>,
}

impl Watcher {
    /// Reads the manifest at `path`; an invalid one is an error (startup fails).
    pub fn open(
        path: &Path,
        grace: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ManifestError> {
        let (manifest, stamp) = manifest::read_file(path)?;
        let snapshot = Snapshot::new(manifest).map_err(matcher_error)?;
        Ok(Self {
            path: path.to_owned(),
            grace,
            clock,
            errors: AtomicU64::new(0),
            state: Mutex::new(State {
                seen: Some(stamp),
                snapshot: Arc::new(snapshot),
            }),
        })
    }

    /// The path watched.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Failed reloads so far (`corral_learning_manifest_errors_total`).
    pub fn errors_total(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The snapshot in force, after a `stat()` and, on a change, a reload.
    pub fn current(&self) -> Arc<Snapshot> {
        self.check().snapshot
    }

    /// Like [`Watcher::current`], with the error of a reload that failed on this call.
    pub fn check(&self) -> Refresh {
        let stamp = FileStamp::of(&self.path);
        let now = self.clock.now();
        let mut state = self.lock();
        let mut error = None;
        if stamp != state.seen {
            state.seen = stamp;
            match manifest::read_file(&self.path) {
                Ok((manifest, read_stamp)) => {
                    state.seen = Some(read_stamp);
                    if manifest != *state.snapshot.manifest {
                        match self.reseeded(&state.snapshot, manifest, now) {
                            Ok(next) => state.snapshot = Arc::new(next),
                            Err(e) => {
                                self.errors.fetch_add(1, Ordering::Relaxed);
                                error = Some(e);
                            }
                        }
                    }
                }
                Err(e) => {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    error = Some(e);
                }
            }
        }
        if state.snapshot.expires.is_some_and(|t| t <= now) {
            let kept: Vec<Guarded> = state
                .snapshot
                .guarded
                .iter()
                .filter(|g| g.until.is_none_or(|t| t > now))
                .cloned()
                .collect();
            // The same values minus some: a matcher that held more holds these.
            if let Ok(next) = Snapshot::build(state.snapshot.manifest.clone(), kept) {
                state.snapshot = Arc::new(next);
            }
        }
        Refresh {
            snapshot: state.snapshot.clone(),
            error,
        }
    }

    /// The snapshot of a new manifest, with the values that left the old one graced.
    fn reseeded(
        &self,
        old: &Snapshot,
        manifest: Manifest,
        now: Instant,
    ) -> Result<Snapshot, ManifestError> {
        let mut guarded = in_force(&manifest);
        let until = now.checked_add(self.grace);
        for g in &old.guarded {
            let left = !manifest.targets.iter().any(|t| t.value == g.target.value);
            let graced_until = match g.until {
                Some(t) => Some(t),
                None => until,
            };
            let live = graced_until.is_some_and(|t| t > now);
            let already = guarded.iter().any(|n| n.target.value == g.target.value);
            if left && live && !already {
                guarded.push(Guarded {
                    scenario_id: g.scenario_id.clone(),
                    target: g.target.clone(),
                    until: graced_until,
                });
            }
        }
        Snapshot::build(Arc::new(manifest), guarded).map_err(matcher_error)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-written: every write is one assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn matcher_error(_: MatcherError) -> ManifestError {
    ManifestError {
        issues: vec![manifest::Issue {
            path: "targets".into(),
            kind: manifest::IssueKind::OutOfRange("what the matcher can hold"),
        }],
    }
}
