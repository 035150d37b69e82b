//! Runs and their budgets. A run is the sequence of calls that share a run id (the
//! `X-Corral-Run` header), per tenant, principal and purpose: one principal cannot spend
//! another's run, and a lab's `simulation`, `replay` and `judge` runs (later) are metered and
//! capped apart from `live` ones.
//!
//! A run's record counts its calls (in all, and per op), its result bytes and its start, and
//! holds what the run did to itself: a lowered autonomy level, dry-run. Both only ever tighten.
//! Where records live is the `RunStore` port: `RunLedger` in this process's memory (one
//! replica: the SQLite default), or corral-store's tables (PostgreSQL, shared by every replica,
//! each charge one atomic check-and-increment).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use corral_policy::AutonomyLevel;
use futures_core::future::BoxFuture;

/// Per-run budgets; `0` (or `Duration::ZERO`) disables one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Calls per run.
    pub max_calls: u64,
    /// Calls per run to one op.
    pub max_calls_per_op: HashMap<String, u64>,
    /// Time from a run's first call.
    pub max_wall_time: Duration,
    /// Bytes of results per run.
    pub max_output_bytes: u64,
    /// Model tokens (prompt plus completion) per run (`budgets.tokens`): once used up, the run's
    /// model calls (ops under [`TOKEN_METERED_NS`]) are refused; its other calls go on.
    pub max_tokens: u64,
}

/// The namespace of the ops that spend model tokens (`llm.chat`): only they are refused by
/// `budgets.tokens`.
pub const TOKEN_METERED_NS: &str = "llm.";

impl Budgets {
    /// Whether any budget is set.
    pub fn any(&self) -> bool {
        self.max_calls > 0
            || self.max_calls_per_op.values().any(|n| *n > 0)
            || !self.max_wall_time.is_zero()
            || self.max_output_bytes > 0
            || self.max_tokens > 0
    }
}

/// Why a run exists: `Live` (the default, and what an audit event stored before events carried
/// a purpose reads back as) and the lab's `Simulation` are used so far.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum RunPurpose {
    /// Calls that act on the world.
    #[default]
    Live,
    /// A lab scenario against mocks.
    Simulation,
    /// A recorded session played back.
    Replay,
    /// A judge scoring a run.
    Judge,
}

impl RunPurpose {
    /// Every purpose, in the order they are documented.
    pub const ALL: [RunPurpose; 4] = [
        RunPurpose::Live,
        RunPurpose::Simulation,
        RunPurpose::Replay,
        RunPurpose::Judge,
    ];

    /// The purpose named `name` (as [`RunPurpose::as_str`] spells it), if there is one.
    pub fn parse(name: &str) -> Option<RunPurpose> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The name, as audited.
    pub fn as_str(self) -> &'static str {
        match self {
            RunPurpose::Live => "live",
            RunPurpose::Simulation => "simulation",
            RunPurpose::Replay => "replay",
            RunPurpose::Judge => "judge",
        }
    }
}

/// Who owns a run, and which (borrowed: looking a known run up allocates nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunKey<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The principal whose calls it is.
    pub principal: &'a str,
    /// Its purpose.
    pub purpose: RunPurpose,
    /// The id the caller chose.
    pub run_id: &'a str,
}

/// A run's owner, as stored next to its record.
#[derive(Debug)]
struct Owner {
    tenant: String,
    principal: String,
    purpose: RunPurpose,
}

impl Owner {
    fn is(&self, k: &RunKey<'_>) -> bool {
        self.purpose == k.purpose && self.principal == k.principal && self.tenant == k.tenant
    }
}

/// One run's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// When its first call arrived (ms since the epoch).
    pub started_ms: i64,
    /// When its last call arrived.
    pub last_ms: i64,
    /// Calls charged.
    pub calls: u64,
    /// Calls charged per op.
    pub per_op: HashMap<String, u64>,
    /// Result bytes.
    pub output_bytes: u64,
    /// Model tokens (prompt plus completion) its model calls used.
    pub tokens: u64,
    /// The level the run lowered itself to.
    pub level: Option<AutonomyLevel>,
    /// Whether the run put itself in dry-run.
    pub dry_run: bool,
}

/// What a run did to itself, as the chain needs it at each call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunView {
    /// The level the run lowered itself to.
    pub level: Option<AutonomyLevel>,
    /// Whether the run put itself in dry-run.
    pub dry_run: bool,
    /// Whether this call opened the run (its first call): what counts a run in the metering.
    pub opened: bool,
}

/// A budget a run has used up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// The budget's config key, e.g. `budgets.max_calls`.
    pub budget: String,
    /// What was used and the limit, in words.
    pub detail: String,
}

/// Every run this process has seen: by run id, then by owner (runs of one id by several owners
/// are rare, so a short list).
#[derive(Debug, Default)]
pub struct RunLedger {
    runs: Mutex<HashMap<String, Vec<(Owner, RunRecord)>>>,
    /// The size at which the next sweep of idle runs happens (0: `FORGET_ABOVE`). Doubled past
    /// what a sweep leaves, so sweeping costs amortized O(1) per new run, not a scan per call.
    sweep_at: std::sync::atomic::AtomicUsize,
    /// The model-call leases held (see [`RunStore::lease_model_call`]): (holder, expiry) by
    /// run. Released when their call ends, so it holds the calls in flight only.
    leases: Mutex<HashMap<LeaseKey, (String, i64)>>,
}

/// A run, owned: the key of a model-call lease.
type LeaseKey = (String, String, RunPurpose, String);

fn lease_key(k: &RunKey<'_>) -> LeaseKey {
    (
        k.tenant.to_owned(),
        k.principal.to_owned(),
        k.purpose,
        k.run_id.to_owned(),
    )
}

/// How long a run's model-call lease lasts unless its holder renews it: a replica that died
/// mid-call blocks its run's model calls this long at most. A holder renews it every
/// [`MODEL_CALL_RENEW`] while its call runs (a stream may last minutes).
pub const MODEL_CALL_LEASE: Duration = Duration::from_secs(30);

/// How often a holder renews its model-call lease.
pub const MODEL_CALL_RENEW: Duration = Duration::from_secs(10);

type Runs = HashMap<String, Vec<(Owner, RunRecord)>>;

fn find<'m>(runs: &'m mut Runs, key: &RunKey<'_>) -> Option<&'m mut RunRecord> {
    runs.get_mut(key.run_id)?
        .iter_mut()
        .find(|(o, _)| o.is(key))
        .map(|(_, r)| r)
}

/// Runs idle this long are forgotten once the ledger is large.
const IDLE_FORGET_MS: i64 = 24 * 3600 * 1000;
const FORGET_ABOVE: usize = 10_000;

impl RunLedger {
    /// How many runs it holds (a run is entered at its first call).
    pub fn len(&self) -> usize {
        self.runs
            .lock()
            .map(|r| r.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// Whether it holds no run.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens (or creates) a run at its call, applies what the call asks of it (only ever
    /// lowering the level or turning dry-run on), and returns what the run is now.
    pub fn enter(
        &self,
        key: &RunKey<'_>,
        now_ms: i64,
        lower_to: Option<AutonomyLevel>,
        dry_run: bool,
    ) -> RunView {
        let Ok(mut runs) = self.runs.lock() else {
            // A poisoned ledger meters nothing; the level and dry-run asked for still apply.
            return RunView {
                level: lower_to,
                dry_run,
                opened: false,
            };
        };
        let sweep_at = match self.sweep_at.load(std::sync::atomic::Ordering::Relaxed) {
            0 => FORGET_ABOVE,
            n => n,
        };
        if runs.len() > sweep_at {
            for owners in runs.values_mut() {
                owners.retain(|(_, r)| now_ms - r.last_ms < IDLE_FORGET_MS);
            }
            runs.retain(|_, owners| !owners.is_empty());
            let next = runs.len().saturating_mul(2).max(FORGET_ABOVE);
            self.sweep_at
                .store(next, std::sync::atomic::Ordering::Relaxed);
        }
        // Look up first: a known run costs no allocation.
        let opened = find(&mut runs, key).is_none();
        if opened {
            runs.entry(key.run_id.to_owned()).or_default().push((
                Owner {
                    tenant: key.tenant.to_owned(),
                    principal: key.principal.to_owned(),
                    purpose: key.purpose,
                },
                RunRecord {
                    started_ms: now_ms,
                    last_ms: now_ms,
                    calls: 0,
                    per_op: HashMap::new(),
                    output_bytes: 0,
                    tokens: 0,
                    level: None,
                    dry_run: false,
                },
            ));
        }
        let Some(r) = find(&mut runs, key) else {
            return RunView {
                level: lower_to,
                dry_run,
                opened,
            };
        };
        r.last_ms = now_ms;
        if let Some(l) = lower_to {
            r.level = Some(r.level.map_or(l, |cur| cur.min(l)));
        }
        r.dry_run |= dry_run;
        RunView {
            level: r.level,
            dry_run: r.dry_run,
            opened,
        }
    }

    /// Charges one call to `op`, or names the budget it would exceed (and charges nothing).
    pub fn charge(
        &self,
        key: &RunKey<'_>,
        op: &str,
        budgets: &Budgets,
        now_ms: i64,
    ) -> Result<(), Exhausted> {
        let Ok(mut runs) = self.runs.lock() else {
            return Err(Exhausted {
                budget: "budgets".to_owned(),
                detail: "the run ledger is unavailable".to_owned(),
            });
        };
        let Some(r) = find(&mut runs, key) else {
            return Ok(());
        };
        let used = r.per_op.get(op).copied().unwrap_or(0);
        if let Some(e) = over_budget(
            r.started_ms,
            Usage {
                calls: r.calls,
                output_bytes: r.output_bytes,
                op_calls: used,
                tokens: r.tokens,
            },
            op,
            budgets,
            now_ms,
        ) {
            return Err(e);
        }
        r.calls += 1;
        match r.per_op.get_mut(op) {
            Some(n) => *n += 1,
            None => {
                r.per_op.insert(op.to_owned(), 1);
            }
        }
        Ok(())
    }

    /// Gives back a charged call that did not run (it raised or met a confirmation).
    pub fn refund(&self, key: &RunKey<'_>, op: &str) {
        if let Ok(mut runs) = self.runs.lock()
            && let Some(r) = find(&mut runs, key)
        {
            r.calls = r.calls.saturating_sub(1);
            if let Some(n) = r.per_op.get_mut(op) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Adds result bytes to a run.
    pub fn add_output(&self, key: &RunKey<'_>, bytes: u64) {
        if let Ok(mut runs) = self.runs.lock()
            && let Some(r) = find(&mut runs, key)
        {
            r.output_bytes = r.output_bytes.saturating_add(bytes);
        }
    }

    /// Adds model tokens to a run.
    pub fn charge_tokens(&self, key: &RunKey<'_>, tokens: u64) {
        if let Ok(mut runs) = self.runs.lock()
            && let Some(r) = find(&mut runs, key)
        {
            r.tokens = r.tokens.saturating_add(tokens);
        }
    }

    /// A run's record, if the ledger has it.
    pub fn get(&self, key: &RunKey<'_>) -> Option<RunRecord> {
        find(&mut *self.runs.lock().ok()?, key).cloned()
    }

    /// See [`RunStore::lease_model_call`].
    pub fn lease_model_call(
        &self,
        key: &RunKey<'_>,
        holder: &str,
        now_ms: i64,
        expires_ms: i64,
    ) -> bool {
        // A poisoned map still works: it is only ever inserted, updated and removed.
        let mut leases = self
            .leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let k = lease_key(key);
        match leases.get(&k) {
            Some((h, expires)) if *expires > now_ms && h != holder => false,
            _ => {
                leases.insert(k, (holder.to_owned(), expires_ms));
                true
            }
        }
    }

    /// See [`RunStore::renew_model_call`].
    pub fn renew_model_call(&self, key: &RunKey<'_>, holder: &str, expires_ms: i64) -> bool {
        let mut leases = self
            .leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match leases.get_mut(&lease_key(key)) {
            Some((h, expires)) if h == holder => {
                *expires = expires_ms;
                true
            }
            _ => false,
        }
    }

    /// See [`RunStore::release_model_call`].
    pub fn release_model_call(&self, key: &RunKey<'_>, holder: &str) {
        let mut leases = self
            .leases
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let k = lease_key(key);
        if leases.get(&k).is_some_and(|(h, _)| h == holder) {
            leases.remove(&k);
        }
    }

    /// How many model-call leases it holds (expired or not).
    pub fn leases(&self) -> usize {
        self.leases.lock().map_or(0, |l| l.len())
    }
}

/// What a run used so far, as `over_budget` checks it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Calls charged.
    pub calls: u64,
    /// Result bytes.
    pub output_bytes: u64,
    /// Calls charged to the op being called.
    pub op_calls: u64,
    /// Model tokens.
    pub tokens: u64,
}

/// The budget a run has used up, if any, before charging one more call to `op`, given what it
/// used so far. Shared by every `RunStore`, so the refusals read the same whichever holds the
/// records.
pub fn over_budget(
    started_ms: i64,
    usage: Usage,
    op: &str,
    budgets: &Budgets,
    now_ms: i64,
) -> Option<Exhausted> {
    let Usage {
        calls,
        output_bytes,
        op_calls,
        tokens,
    } = usage;
    let elapsed = u64::try_from(now_ms.saturating_sub(started_ms)).unwrap_or(0);
    if !budgets.max_wall_time.is_zero() && Duration::from_millis(elapsed) >= budgets.max_wall_time {
        return Some(Exhausted {
            budget: "budgets.max_wall_time".to_owned(),
            detail: format!(
                "the run started {} s ago; its wall-time budget is {} s",
                elapsed / 1000,
                budgets.max_wall_time.as_secs()
            ),
        });
    }
    if budgets.max_output_bytes > 0 && output_bytes >= budgets.max_output_bytes {
        return Some(Exhausted {
            budget: "budgets.max_output_bytes".to_owned(),
            detail: format!(
                "the run's results total {output_bytes} bytes; its budget is {} bytes",
                budgets.max_output_bytes
            ),
        });
    }
    if budgets.max_tokens > 0 && op.starts_with(TOKEN_METERED_NS) && tokens >= budgets.max_tokens {
        return Some(Exhausted {
            budget: "budgets.tokens".to_owned(),
            detail: format!(
                "the run's model calls used {tokens} tokens; its budget is {} tokens",
                budgets.max_tokens
            ),
        });
    }
    if budgets.max_calls > 0 && calls >= budgets.max_calls {
        return Some(Exhausted {
            budget: "budgets.max_calls".to_owned(),
            detail: format!("the run has made its {} calls", budgets.max_calls),
        });
    }
    if let Some(max) = budgets.max_calls_per_op.get(op).filter(|m| **m > 0)
        && op_calls >= *max
    {
        return Some(Exhausted {
            budget: format!("budgets.max_calls_per_op.{op}"),
            detail: format!("the run has made its {max} calls to `{op}`"),
        });
    }
    None
}

/// A run store failed; the call is refused (fail closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run store: {0}")]
pub struct RunStoreError(pub String);

/// Where run records live. `charge` must be atomic across every replica sharing the store:
/// of concurrent charges to one run, no more than its budget succeed.
pub trait RunStore: Send + Sync + std::fmt::Debug {
    /// `memory`, `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// See [`RunLedger::enter`].
    fn enter<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        now_ms: i64,
        lower_to: Option<AutonomyLevel>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<RunView, RunStoreError>>;
    /// See [`RunLedger::charge`]; the outer error is the store's.
    fn charge<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
        budgets: &'a Budgets,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Result<(), Exhausted>, RunStoreError>>;
    /// See [`RunLedger::refund`].
    fn refund<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>>;
    /// See [`RunLedger::add_output`].
    fn add_output<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        bytes: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>>;
    /// See [`RunLedger::charge_tokens`].
    fn charge_tokens<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        tokens: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>>;
    /// Takes the run's model-call lease for `holder` (an id unique to one call) until
    /// `expires_ms`: `true` when taken, `false` while another holder's lease has not expired
    /// at `now_ms`. Atomic across every replica sharing the store: of concurrent takers of one
    /// run, one gets it. A run with a token budget makes one model call at a time (its tokens
    /// are known only once a call ended).
    fn lease_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        now_ms: i64,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>>;
    /// Moves `holder`'s lease's expiry to `expires_ms`; `false` when it no longer holds it.
    fn renew_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>>;
    /// Gives `holder`'s lease back (another holder's is left alone).
    fn release_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>>;
}

impl RunStore for RunLedger {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn enter<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        now_ms: i64,
        lower_to: Option<AutonomyLevel>,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<RunView, RunStoreError>> {
        Box::pin(std::future::ready(Ok(RunLedger::enter(
            self, key, now_ms, lower_to, dry_run,
        ))))
    }

    fn charge<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
        budgets: &'a Budgets,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Result<(), Exhausted>, RunStoreError>> {
        Box::pin(std::future::ready(Ok(RunLedger::charge(
            self, key, op, budgets, now_ms,
        ))))
    }

    fn refund<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        op: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        RunLedger::refund(self, key, op);
        Box::pin(std::future::ready(Ok(())))
    }

    fn add_output<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        bytes: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        RunLedger::add_output(self, key, bytes);
        Box::pin(std::future::ready(Ok(())))
    }

    fn charge_tokens<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        tokens: u64,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        RunLedger::charge_tokens(self, key, tokens);
        Box::pin(std::future::ready(Ok(())))
    }

    fn lease_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        now_ms: i64,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>> {
        Box::pin(std::future::ready(Ok(RunLedger::lease_model_call(
            self, key, holder, now_ms, expires_ms,
        ))))
    }

    fn renew_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
        expires_ms: i64,
    ) -> BoxFuture<'a, Result<bool, RunStoreError>> {
        Box::pin(std::future::ready(Ok(RunLedger::renew_model_call(
            self, key, holder, expires_ms,
        ))))
    }

    fn release_model_call<'a>(
        &'a self,
        key: &'a RunKey<'a>,
        holder: &'a str,
    ) -> BoxFuture<'a, Result<(), RunStoreError>> {
        RunLedger::release_model_call(self, key, holder);
        Box::pin(std::future::ready(Ok(())))
    }
}
