//! The `audit_events` table: `impl AuditSink for Store`, counts and recent events.
//!
//! Append-only: the only statement that writes this table is `INSERT`; a duplicate `request_id`
//! fails on the primary key instead of overwriting. `act_chain`, `args_shape` and `attestation`
//! are stored as JSON text.

use corral_ports::audit::{AttestationRecord, AuditError, AuditEvent, AuditSink, Outcome};
use corral_ports::runs::RunPurpose;
use futures_core::future::BoxFuture;

use crate::{Store, StoreError};

const COUNT_ALL: &str = "SELECT COUNT(*) FROM audit_events";
const COUNT_TENANT: &str = "SELECT COUNT(*) FROM audit_events WHERE tenant = $1";

/// The columns of `audit_events`, in `EventRow` order (a macro so `concat!` can use it).
macro_rules! columns {
    () => {
        "request_id, tenant, ts_ms, principal_id, principal_kind, act_chain, op, outcome, code, \
         rule, args_hash, args_shape, status, duration_us, attestation, action_id, run_id, detail, \
         purpose, trace_id"
    };
}

pub(crate) const INSERT_EVENT: &str = concat!(
    "INSERT INTO audit_events (",
    columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
);
/// The optional filters of the recent-events queries: a `NULL` parameter matches every row.
/// (`CAST(.. AS TEXT)` gives PostgreSQL the parameter's type when it is `NULL`; SQLite reads it
/// the same.)
macro_rules! matching {
    ($run:literal, $op:literal, $principal:literal, $purpose:literal) => {
        concat!(
            " (CAST(",
            $run,
            " AS TEXT) IS NULL OR run_id = ",
            $run,
            ")",
            " AND (CAST(",
            $op,
            " AS TEXT) IS NULL OR op = ",
            $op,
            ")",
            " AND (CAST(",
            $principal,
            " AS TEXT) IS NULL OR principal_id = ",
            $principal,
            ")",
            " AND (CAST(",
            $purpose,
            " AS TEXT) IS NULL OR purpose = ",
            $purpose,
            ")"
        )
    };
}

/// The page's start ([`AuditCursor`]): rows after it in the listing's order; `NULL` from the
/// newest.
macro_rules! after {
    ($ms:literal, $id:literal) => {
        concat!(
            " AND (CAST(",
            $ms,
            " AS BIGINT) IS NULL OR ts_ms < ",
            $ms,
            " OR (ts_ms = ",
            $ms,
            " AND request_id < ",
            $id,
            "))"
        )
    };
}

const RECENT_ALL: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM audit_events WHERE",
    matching!("$1", "$2", "$3", "$4"),
    after!("$6", "$7"),
    " ORDER BY ts_ms DESC, request_id DESC LIMIT $5"
);
const RECENT_TENANT: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM audit_events WHERE tenant = $1 AND",
    matching!("$2", "$3", "$4", "$5"),
    after!("$7", "$8"),
    " ORDER BY ts_ms DESC, request_id DESC LIMIT $6"
);

/// Narrows [`Store::audit_matching`]: each field that is set must match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// The run (`run_id`).
    pub run_id: Option<String>,
    /// The op id as called.
    pub op: Option<String>,
    /// The caller's principal id.
    pub principal_id: Option<String>,
    /// The purpose of the call (`live`, `simulation`).
    pub purpose: Option<RunPurpose>,
}

/// Where a page of [`Store::audit_page`] starts: after this event in the listing's order
/// (`ts_ms` descending, then `request_id`, unique, descending). Its text form, `GET /audit`'s
/// `next`, is `<ts_ms>.<request_id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCursor {
    /// The last listed event's time.
    pub ts_ms: i64,
    /// The last listed event's request id.
    pub request_id: String,
}

impl AuditCursor {
    /// The cursor after `e`.
    pub fn after(e: &AuditEvent) -> Self {
        Self {
            ts_ms: e.ts_ms,
            request_id: e.request_id.clone(),
        }
    }

    /// Parses what `Display` wrote (1-15 digits, `.`, a request id of 1-256 characters
    /// without control characters: what `GET /audit`'s document says); `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let (ms, id) = s.split_once('.')?;
        let digits = !ms.is_empty() && ms.len() <= 15 && ms.bytes().all(|b| b.is_ascii_digit());
        let id_ok =
            !id.is_empty() && id.chars().count() <= 256 && !id.chars().any(char::is_control);
        if !digits || !id_ok {
            return None;
        }
        Some(Self {
            ts_ms: ms.parse().ok()?,
            request_id: id.to_owned(),
        })
    }
}

impl std::fmt::Display for AuditCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.ts_ms, self.request_id)
    }
}

/// One stored row, as the drivers decode it.
#[derive(sqlx::FromRow)]
struct EventRow {
    request_id: String,
    tenant: String,
    ts_ms: i64,
    principal_id: String,
    principal_kind: String,
    act_chain: String,
    op: String,
    outcome: String,
    code: Option<String>,
    rule: Option<String>,
    args_hash: String,
    args_shape: String,
    status: i32,
    duration_us: i64,
    attestation: Option<String>,
    action_id: Option<String>,
    run_id: Option<String>,
    detail: Option<String>,
    purpose: String,
    trace_id: Option<String>,
}

fn malformed(request_id: &str, what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::QueryFailed {
        what: "read audit events",
        reason: format!("stored event {request_id:?} has a malformed `{what}`: {err}"),
    }
}

impl TryFrom<EventRow> for AuditEvent {
    type Error = StoreError;

    fn try_from(r: EventRow) -> Result<Self, StoreError> {
        let id = r.request_id.as_str();
        let act_chain: Vec<String> =
            serde_json::from_str(&r.act_chain).map_err(|e| malformed(id, "act_chain", e))?;
        let outcome: Outcome = serde_json::from_value(serde_json::Value::String(r.outcome))
            .map_err(|e| malformed(id, "outcome", e))?;
        let args_shape: serde_json::Value =
            serde_json::from_str(&r.args_shape).map_err(|e| malformed(id, "args_shape", e))?;
        let status = u16::try_from(r.status).map_err(|e| malformed(id, "status", e))?;
        let attestation: Option<AttestationRecord> = r
            .attestation
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| malformed(id, "attestation", e))?;
        let purpose = RunPurpose::parse(&r.purpose).ok_or_else(|| {
            malformed(
                id,
                "purpose",
                format!(
                    "{:?} is not a purpose",
                    r.purpose.chars().take(64).collect::<String>()
                ),
            )
        })?;
        Ok(AuditEvent {
            request_id: r.request_id,
            tenant: r.tenant,
            ts_ms: r.ts_ms,
            principal_id: r.principal_id,
            principal_kind: r.principal_kind,
            act_chain,
            op: r.op,
            outcome,
            code: r.code,
            rule: r.rule,
            args_hash: r.args_hash,
            args_shape,
            status,
            duration_us: r.duration_us,
            attestation,
            action_id: r.action_id,
            run_id: r.run_id,
            detail: r.detail,
            purpose,
            trace_id: r.trace_id,
        })
    }
}

/// The JSON-encoded columns of an event.
pub(crate) struct Encoded {
    pub(crate) act_chain: String,
    pub(crate) args_shape: String,
    pub(crate) attestation: Option<String>,
}

impl Encoded {
    pub(crate) fn new(event: &AuditEvent) -> Result<Self, StoreError> {
        Ok(Self {
            act_chain: serde_json::to_string(&event.act_chain).map_err(encode_failed)?,
            args_shape: serde_json::to_string(&event.args_shape).map_err(encode_failed)?,
            attestation: event
                .attestation
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(encode_failed)?,
        })
    }
}

/// Binds an event's columns to `INSERT_EVENT`, in column order.
macro_rules! bind_event {
    ($q:expr, $event:expr, $e:expr) => {
        $q.bind($event.request_id.as_str())
            .bind($event.tenant.as_str())
            .bind($event.ts_ms)
            .bind($event.principal_id.as_str())
            .bind($event.principal_kind.as_str())
            .bind($e.act_chain.as_str())
            .bind($event.op.as_str())
            .bind($event.outcome.as_str())
            .bind($event.code.as_deref())
            .bind($event.rule.as_deref())
            .bind($event.args_hash.as_str())
            .bind($e.args_shape.as_str())
            .bind(i32::from($event.status))
            .bind($event.duration_us)
            .bind($e.attestation.as_deref())
            .bind($event.action_id.as_deref())
            .bind($event.run_id.as_deref())
            .bind($event.detail.as_deref())
            .bind($event.purpose.as_str())
            .bind($event.trace_id.as_deref())
    };
}

fn encode_failed(err: serde_json::Error) -> StoreError {
    StoreError::QueryFailed {
        what: "append audit event",
        reason: format!("the event cannot be encoded: {err}"),
    }
}

impl Store {
    /// Appends one audit event; returns once it is committed (see the crate doc on
    /// durability). A `request_id` already stored is a `store.query_failed` error and leaves
    /// the stored event unchanged.
    pub async fn append_audit(&self, event: &AuditEvent) -> Result<(), StoreError> {
        let e = Encoded::new(event)?;
        on_pool!(&self.pool, p => bind_event!(sqlx::query(INSERT_EVENT), event, e)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(|err| self.redactor.query("append audit event", err))
    }

    /// Appends events in one statement (one transaction): all are committed, or none is. One
    /// commit (one fsync) and one round trip to the driver for the batch is what lets many
    /// concurrent calls be audited durably and fast.
    pub async fn append_audit_batch(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let encoded = events
            .iter()
            .map(Encoded::new)
            .collect::<Result<Vec<_>, _>>()?;
        self.insert_encoded(events.iter().zip(&encoded)).await
    }

    /// One multi-row `INSERT` of events already encoded (the rows must not be empty).
    pub(crate) async fn insert_encoded<'e>(
        &self,
        rows: impl Iterator<Item = (&'e AuditEvent, &'e Encoded)>,
    ) -> Result<(), StoreError> {
        on_pool!(&self.pool, p => {
            let mut qb = sqlx::QueryBuilder::new(concat!("INSERT INTO audit_events (", columns!(), ") "));
            qb.push_values(rows, |mut b, (event, e)| {
                b.push_bind(event.request_id.as_str())
                    .push_bind(event.tenant.as_str())
                    .push_bind(event.ts_ms)
                    .push_bind(event.principal_id.as_str())
                    .push_bind(event.principal_kind.as_str())
                    .push_bind(e.act_chain.as_str())
                    .push_bind(event.op.as_str())
                    .push_bind(event.outcome.as_str())
                    .push_bind(event.code.as_deref())
                    .push_bind(event.rule.as_deref())
                    .push_bind(event.args_hash.as_str())
                    .push_bind(e.args_shape.as_str())
                    .push_bind(i32::from(event.status))
                    .push_bind(event.duration_us)
                    .push_bind(e.attestation.as_deref())
                    .push_bind(event.action_id.as_deref())
                    .push_bind(event.run_id.as_deref())
                    .push_bind(event.detail.as_deref())
                    .push_bind(event.purpose.as_str())
                    .push_bind(event.trace_id.as_deref());
            });
            qb.build().execute(p).await.map(|_| ())
        })
        .map_err(|err| self.redactor.query("append audit events", err))
    }

    /// The number of stored audit events, of one tenant or of all.
    pub async fn audit_count(&self, tenant: Option<&str>) -> Result<i64, StoreError> {
        on_pool!(&self.pool, p => match tenant {
            Some(t) => sqlx::query_scalar::<_, i64>(COUNT_TENANT).bind(t).fetch_one(p).await,
            None => sqlx::query_scalar::<_, i64>(COUNT_ALL).fetch_one(p).await,
        })
        .map_err(|e| self.redactor.query("count audit events", e))
    }

    /// The `limit` most recent audit events, of one tenant or of all, newest first (ties on
    /// `ts_ms` are broken by `request_id`, descending).
    pub async fn audit_recent(
        &self,
        tenant: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        self.audit_matching(tenant, &AuditFilter::default(), limit)
            .await
    }

    /// Like [`Store::audit_recent`], only the events `filter` matches.
    pub async fn audit_matching(
        &self,
        tenant: Option<&str>,
        filter: &AuditFilter,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        self.audit_page(tenant, filter, None, limit).await
    }

    /// Like [`Store::audit_matching`], starting after `after` (`None`: from the newest).
    pub async fn audit_page(
        &self,
        tenant: Option<&str>,
        filter: &AuditFilter,
        after: Option<&AuditCursor>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let limit = i64::from(limit);
        let (after_ms, after_id) = (after.map(|c| c.ts_ms), after.map(|c| c.request_id.as_str()));
        let (run, op, who, purpose) = (
            filter.run_id.as_deref(),
            filter.op.as_deref(),
            filter.principal_id.as_deref(),
            filter.purpose.map(RunPurpose::as_str),
        );
        let rows: Vec<EventRow> = on_pool!(&self.pool, p => match tenant {
            Some(t) => sqlx::query_as(RECENT_TENANT)
                .bind(t).bind(run).bind(op).bind(who).bind(purpose).bind(limit)
                .bind(after_ms).bind(after_id)
                .fetch_all(p).await,
            None => sqlx::query_as(RECENT_ALL)
                .bind(run).bind(op).bind(who).bind(purpose).bind(limit)
                .bind(after_ms).bind(after_id)
                .fetch_all(p).await,
        })
        .map_err(|e| self.redactor.query("read audit events", e))?;
        rows.into_iter().map(AuditEvent::try_from).collect()
    }
}

impl AuditSink for Store {
    fn append<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            self.append_audit(event)
                .await
                .map_err(|e| AuditError(format!("{}: {e}", e.code())))
        })
    }
}
