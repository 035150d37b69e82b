//! Human confirmation: the pending action a guarded call raises, the `ConfirmationStore` port
//! that keeps actions and approvals, and its in-memory implementation.
//!
//! An action is keyed by the SHA-256 of the canonical JSON (RFC 8785) of `{tenant, requester,
//! op, op_version, args}`: the same caller retrying the same op with the same arguments finds
//! it; changed arguments are another key, so another action. At most one action per key is
//! live (not expired) at a time. Its life:
//!
//! ```text
//! pending --approve--> approved --consume (once)--> running --finish--> done
//!    \--deny--> denied
//! ```
//!
//! An approval is a separate record that consuming *removes*, atomically: of any number of
//! concurrent retries on any number of replicas sharing the store, exactly one gets it; the
//! others find the action `running` (and wait for its outcome) or `done` (and get the stored
//! outcome). Everything expires with the action (`expires_ms` = raised + TTL); an expired key
//! raises a new action. SQL implementations live in corral-store.
//!
//! An action belongs to its requester's full identity (`Principal::identity`: where the
//! credential came from, person or service, and the id), never to the id alone. What one
//! caller can make the store keep is bounded: the canonical arguments of an action are at most
//! `MAX_ACTION_ARGS_BYTES`, a requester has at most `GuardPolicy::max_pending` pending actions
//! (counted by the store, atomically with raising), and a listing is a page.

use std::collections::HashMap;
use std::sync::Mutex;

use futures_core::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// The most bytes of canonical JSON arguments an action may hold: what a person can review,
/// and what one pending action may make the store keep.
pub const MAX_ACTION_ARGS_BYTES: usize = 64 * 1024;

/// How many pending actions one principal may have at once, unless `guardrails.max_pending`
/// says otherwise.
pub const DEFAULT_MAX_PENDING: u64 = 20;

/// What `ConfirmationStore::raise` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    /// The action is now its key's live action.
    Raised,
    /// The key already has a live action; nothing changed.
    KeyTaken,
    /// The requester already has `pending` (at least the cap) pending actions; nothing changed.
    TooManyPending {
        /// How many the requester has.
        pending: u64,
        /// When the first of them expires (ms since the epoch).
        first_expiry_ms: Option<i64>,
    },
}

/// Where a page of `ConfirmationStore::list` starts: after this action, in the listing's order
/// (newest first: `created_ms` descending, then `action_id` descending). Shown to clients as an
/// opaque `next` string, `<created_ms>.<action_id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The last listed action's `created_ms`.
    pub created_ms: i64,
    /// The last listed action's id.
    pub action_id: String,
}

impl Cursor {
    /// The cursor after `a`.
    pub fn after(a: &Action) -> Self {
        Self {
            created_ms: a.created_ms,
            action_id: a.action_id.clone(),
        }
    }

    /// Parses what `Display` wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (ms, id) = s.split_once('.')?;
        let valid_id = !id.is_empty()
            && id.len() <= 64
            && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !valid_id || ms.is_empty() || ms.len() > 15 || !ms.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(Self {
            created_ms: ms.parse().ok()?,
            action_id: id.to_owned(),
        })
    }

    /// Whether `a` comes after this cursor in the listing's order.
    pub fn precedes(&self, a: &Action) -> bool {
        a.created_ms < self.created_ms
            || (a.created_ms == self.created_ms && a.action_id < self.action_id)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.created_ms, self.action_id)
    }
}

/// Where an action is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    /// Raised; waits for a human's decision.
    Pending,
    /// Approved; the next retry with the same arguments runs it.
    Approved,
    /// Denied; retries are refused until it expires.
    Denied,
    /// The approval was consumed; the op is running.
    Running,
    /// The op ran; its outcome is stored.
    Done,
}

impl ActionState {
    /// The snake_case name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Approved => "approved",
            ActionState::Denied => "denied",
            ActionState::Running => "running",
            ActionState::Done => "done",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            ActionState::Pending,
            ActionState::Approved,
            ActionState::Denied,
            ActionState::Running,
            ActionState::Done,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }
}

/// The outcome of an approved call, stored so a retry gets it without running the op again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredOutcome {
    /// The op's JSON result.
    Json {
        /// The result.
        value: serde_json::Value,
    },
    /// The op failed (after it was allowed and started).
    Refused {
        /// HTTP status.
        status: u16,
        /// Stable code.
        code: String,
        /// Message.
        message: String,
    },
    /// The op answered a byte stream, which is not stored.
    Stream {
        /// Its MIME type.
        content_type: String,
        /// Its length.
        len: u64,
    },
}

/// One action, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Random id, shown to the caller and used in `POST /confirmations/{id}/decision`.
    pub action_id: String,
    /// The key (hex SHA-256 of the canonical `{tenant, requester, op, op_version, args}`).
    pub key: String,
    /// The tenant.
    pub tenant: String,
    /// Who raised it (the principal id: for a delegated caller, the person it acts for), as
    /// shown to people and in the audit.
    pub requester: String,
    /// Who raised it, fully (`Principal::identity`): what a decision and a listing compare.
    /// Empty for an action stored before identities were (it then matches nobody).
    pub requester_identity: String,
    /// `human`, `delegated` or `service`.
    pub requester_kind: String,
    /// The op id.
    pub op: String,
    /// The op's version when raised.
    pub op_version: String,
    /// `confirm` or `destructive`.
    pub tier: String,
    /// Why it needs a human, shown in the prompt.
    pub reason: String,
    /// The canonical JSON of the arguments: what is approved is byte for byte what runs.
    pub args: String,
    /// Where it is in its life.
    pub state: ActionState,
    /// When it was raised (ms since the epoch).
    pub created_ms: i64,
    /// When it (its approval, its stored outcome) expires.
    pub expires_ms: i64,
    /// When it was decided.
    pub decided_ms: Option<i64>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// The stored outcome, once `done`.
    pub outcome: Option<StoredOutcome>,
}

/// The store failed; the call is refused (fail closed) with `store.query_failed`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("confirmation store: {0}")]
pub struct ConfirmationError(pub String);

/// Where actions and approvals live. Every method is atomic on its own; `consume` is the one
/// that must be exactly-once across every replica sharing the store.
pub trait ConfirmationStore: Send + Sync + std::fmt::Debug {
    /// `memory`, `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;

    /// Takes the live approval of `key`, if there is one, and moves its action to `running`.
    /// Of concurrent callers, exactly one gets `Some`.
    fn consume<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>>;

    /// The live action of `key` (not expired at `now_ms`), if any.
    fn current<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>>;

    /// Registers `action` (pending) as its key's live action, unless the key already has a live
    /// one (`KeyTaken`) or its requester (tenant and identity) already has `max_pending` live
    /// pending actions (`TooManyPending`): then nothing changes. The count and the insert are
    /// one atomic unit, so concurrent raises never go past the cap.
    fn raise<'a>(
        &'a self,
        action: &'a Action,
        now_ms: i64,
        max_pending: u64,
    ) -> BoxFuture<'a, Result<Raised, ConfirmationError>>;

    /// An action of `tenant` by id, expired or not.
    fn get<'a>(
        &'a self,
        tenant: &'a str,
        action_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>>;

    /// Moves a pending action to `approved` (recording the approval) or `denied`. `false` when
    /// it was no longer pending.
    fn decide<'a>(
        &'a self,
        action_id: &'a str,
        approve: bool,
        by: &'a str,
        at_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>>;

    /// Stores the outcome of a `running` action, which becomes `done`.
    fn finish<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<(), ConfirmationError>>;

    /// Extends the lease of a `running` action to `until_ms`: the request running its op says it
    /// is alive (every [`RUNNING_LEASE_MS`] / 3). `false` when it is no longer running.
    fn renew<'a>(
        &'a self,
        action_id: &'a str,
        until_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>>;

    /// Stores `outcome` on a `running` action whose lease ran out before `now_ms` (the process
    /// running it died: `kill -9`, a crash, a lost host), which becomes `done`. `false` when it
    /// is not running, or its lease is live (its runner is alive), or it has none (consumed
    /// before leases existed). Atomic with `renew` and `finish`: a live runner is never
    /// overtaken.
    fn abandon<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>>;

    /// Gives the approval of a `running` action back: it is `approved` again and its approval
    /// live until the action expires (its op failed before anything ran: the backend could not
    /// start it). `false` when the action was not running, or has expired (then the caller
    /// stores its outcome as usual).
    fn release<'a>(
        &'a self,
        action_id: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>>;

    /// The live actions of a tenant (of one requester identity, or all), newest first: at most
    /// `limit`, those after `after` when it is given.
    fn list<'a>(
        &'a self,
        tenant: &'a str,
        requester_identity: Option<&'a str>,
        now_ms: i64,
        after: Option<&'a Cursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Action>, ConfirmationError>>;

    /// Removes what expired: approvals and key entries at once (neither can be used after
    /// `expires_ms`), actions once they have been expired for `keep_ms` (so a late decision
    /// still gets "expired" rather than "not found" for a while). The number of actions removed.
    fn purge<'a>(
        &'a self,
        now_ms: i64,
        keep_ms: i64,
    ) -> BoxFuture<'a, Result<u64, ConfirmationError>>;
}

/// How long a consumed action's runner holds it without renewing: `consume` starts the lease,
/// the runner renews it every third of this, and past it a retry may `abandon` the action.
pub const RUNNING_LEASE_MS: i64 = 15_000;

/// How long an expired action is kept before `purge` removes it.
pub const KEEP_EXPIRED_MS: i64 = 24 * 3600 * 1000;

#[derive(Debug, Default)]
struct MemInner {
    actions: HashMap<String, Action>,
    /// key -> live action id.
    keys: HashMap<String, String>,
    /// key -> (action id, expires_ms) of a live approval.
    approvals: HashMap<String, (String, i64)>,
    /// action id -> the lease of its runner, while it is `running`.
    leases: HashMap<String, i64>,
}

/// Actions in this process's memory: correct for a single replica only, and lost on restart.
#[derive(Debug, Default)]
pub struct MemoryConfirmations {
    inner: Mutex<MemInner>,
}

impl MemoryConfirmations {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut MemInner) -> T) -> Result<T, ConfirmationError> {
        let mut g = self
            .inner
            .lock()
            .map_err(|_| ConfirmationError("the in-memory store's lock is poisoned".to_owned()))?;
        Ok(f(&mut g))
    }
}

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

impl ConfirmationStore for MemoryConfirmations {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn purge<'a>(
        &'a self,
        now_ms: i64,
        keep_ms: i64,
    ) -> BoxFuture<'a, Result<u64, ConfirmationError>> {
        ready(self.with(|m| {
            m.approvals.retain(|_, (_, expires)| *expires > now_ms);
            let live: std::collections::HashSet<String> = m
                .actions
                .values()
                .filter(|a| a.expires_ms > now_ms)
                .map(|a| a.action_id.clone())
                .collect();
            m.keys.retain(|_, id| live.contains(id));
            let before = m.actions.len();
            m.actions
                .retain(|_, a| a.expires_ms > now_ms.saturating_sub(keep_ms));
            u64::try_from(before - m.actions.len()).unwrap_or(u64::MAX)
        }))
    }

    fn consume<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        ready(self.with(|m| {
            let (id, expires) = m.approvals.get(key)?.clone();
            m.approvals.remove(key);
            if expires <= now_ms {
                return None;
            }
            let a = m.actions.get_mut(&id)?;
            a.state = ActionState::Running;
            let a = a.clone();
            m.leases.insert(id, now_ms.saturating_add(RUNNING_LEASE_MS));
            Some(a)
        }))
    }

    fn renew<'a>(
        &'a self,
        action_id: &'a str,
        until_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        ready(self.with(|m| {
            let running = m
                .actions
                .get(action_id)
                .is_some_and(|a| a.state == ActionState::Running);
            if running {
                m.leases.insert(action_id.to_owned(), until_ms);
            }
            running
        }))
    }

    fn abandon<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        ready(self.with(|m| {
            let stale = m.leases.get(action_id).is_some_and(|l| *l < now_ms);
            let Some(a) = m.actions.get_mut(action_id) else {
                return false;
            };
            if a.state != ActionState::Running || !stale {
                return false;
            }
            a.state = ActionState::Done;
            a.outcome = Some(outcome.clone());
            m.leases.remove(action_id);
            true
        }))
    }

    fn current<'a>(
        &'a self,
        key: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        ready(self.with(|m| {
            let id = m.keys.get(key)?;
            m.actions.get(id).filter(|a| a.expires_ms > now_ms).cloned()
        }))
    }

    fn raise<'a>(
        &'a self,
        action: &'a Action,
        now_ms: i64,
        max_pending: u64,
    ) -> BoxFuture<'a, Result<Raised, ConfirmationError>> {
        ready(self.with(|m| {
            let live = m
                .keys
                .get(&action.key)
                .and_then(|id| m.actions.get(id))
                .is_some_and(|a| a.expires_ms > now_ms);
            if live {
                return Raised::KeyTaken;
            }
            let mut pending = 0u64;
            let mut first_expiry_ms: Option<i64> = None;
            for a in m.actions.values().filter(|a| {
                a.state == ActionState::Pending
                    && a.expires_ms > now_ms
                    && a.tenant == action.tenant
                    && a.requester_identity == action.requester_identity
            }) {
                pending += 1;
                first_expiry_ms =
                    Some(first_expiry_ms.map_or(a.expires_ms, |e| e.min(a.expires_ms)));
            }
            if pending >= max_pending {
                return Raised::TooManyPending {
                    pending,
                    first_expiry_ms,
                };
            }
            m.approvals.remove(&action.key);
            m.keys.insert(action.key.clone(), action.action_id.clone());
            m.actions.insert(action.action_id.clone(), action.clone());
            // Forget what expired long ago, so the map does not grow without bound.
            let horizon = now_ms.saturating_sub(24 * 3600 * 1000);
            if m.actions.len() > 4096 {
                m.actions.retain(|_, a| a.expires_ms > horizon);
                let actions = &m.actions;
                m.keys.retain(|_, id| actions.contains_key(id));
            }
            Raised::Raised
        }))
    }

    fn get<'a>(
        &'a self,
        tenant: &'a str,
        action_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Action>, ConfirmationError>> {
        ready(self.with(|m| {
            m.actions
                .get(action_id)
                .filter(|a| a.tenant == tenant)
                .cloned()
        }))
    }

    fn decide<'a>(
        &'a self,
        action_id: &'a str,
        approve: bool,
        by: &'a str,
        at_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        ready(self.with(|m| {
            let Some(a) = m.actions.get_mut(action_id) else {
                return false;
            };
            if a.state != ActionState::Pending {
                return false;
            }
            a.state = if approve {
                ActionState::Approved
            } else {
                ActionState::Denied
            };
            a.decided_ms = Some(at_ms);
            a.decided_by = Some(by.to_owned());
            if approve {
                let entry = (a.action_id.clone(), a.expires_ms);
                let key = a.key.clone();
                m.approvals.insert(key, entry);
            }
            true
        }))
    }

    fn finish<'a>(
        &'a self,
        action_id: &'a str,
        outcome: &'a StoredOutcome,
        _now_ms: i64,
    ) -> BoxFuture<'a, Result<(), ConfirmationError>> {
        ready(self.with(|m| {
            if let Some(a) = m.actions.get_mut(action_id)
                && a.state == ActionState::Running
            {
                a.state = ActionState::Done;
                a.outcome = Some(outcome.clone());
            }
            m.leases.remove(action_id);
        }))
    }

    fn release<'a>(
        &'a self,
        action_id: &'a str,
        now_ms: i64,
    ) -> BoxFuture<'a, Result<bool, ConfirmationError>> {
        ready(self.with(|m| {
            let Some(a) = m.actions.get_mut(action_id) else {
                return false;
            };
            if a.state != ActionState::Running || a.expires_ms <= now_ms {
                return false;
            }
            a.state = ActionState::Approved;
            let (key, expires) = (a.key.clone(), a.expires_ms);
            m.leases.remove(action_id);
            m.approvals.insert(key, (action_id.to_owned(), expires));
            true
        }))
    }

    fn list<'a>(
        &'a self,
        tenant: &'a str,
        requester_identity: Option<&'a str>,
        now_ms: i64,
        after: Option<&'a Cursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Action>, ConfirmationError>> {
        ready(self.with(|m| {
            let mut v: Vec<&Action> = m
                .actions
                .values()
                .filter(|a| {
                    a.tenant == tenant
                        && a.expires_ms > now_ms
                        && requester_identity
                            .is_none_or(|r| !r.is_empty() && a.requester_identity == r)
                        && after.is_none_or(|c| c.precedes(a))
                })
                .collect();
            v.sort_by(|a, b| {
                b.created_ms
                    .cmp(&a.created_ms)
                    .then_with(|| b.action_id.cmp(&a.action_id))
            });
            v.into_iter()
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .cloned()
                .collect()
        }))
    }
}
