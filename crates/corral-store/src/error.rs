//! `StoreError`, and the redaction that keeps a connection string's password out of it.
//!
//! Every message names the store by a redacted target (`postgres://user@host:port/db`, never the
//! password or the query string) and every reason taken from a driver error is scrubbed of the
//! password before it is kept, so neither `Display` nor `Debug` of a `StoreError` can leak it.

/// `store.unavailable`: the store cannot be reached or opened.
pub const STORE_UNAVAILABLE: &str = "store.unavailable";
/// `store.migration_failed`: the schema could not be brought up to date.
pub const STORE_MIGRATION_FAILED: &str = "store.migration_failed";
/// `store.query_failed`: a statement failed (including a duplicate `request_id`).
pub const STORE_QUERY_FAILED: &str = "store.query_failed";

/// A storage failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The URL is not understood, or the database cannot be reached or opened.
    #[error("store unavailable ({target}): {reason}")]
    Unavailable {
        /// The store, with any password removed.
        target: String,
        /// What went wrong, with any password removed.
        reason: String,
    },
    /// A migration failed; the store was not opened.
    #[error("store migration failed ({target}): {reason}")]
    MigrationFailed {
        /// The store, with any password removed.
        target: String,
        /// What went wrong, with any password removed.
        reason: String,
    },
    /// A statement failed.
    #[error("store query failed ({what}): {reason}")]
    QueryFailed {
        /// What was being done, e.g. `append audit event`.
        what: &'static str,
        /// What went wrong, with any password removed.
        reason: String,
    },
}

impl StoreError {
    /// The stable code: `store.unavailable`, `store.migration_failed` or `store.query_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => STORE_UNAVAILABLE,
            StoreError::MigrationFailed { .. } => STORE_MIGRATION_FAILED,
            StoreError::QueryFailed { .. } => STORE_QUERY_FAILED,
        }
    }

    /// How to fix it, in one line.
    pub fn fix(&self) -> &'static str {
        match self {
            StoreError::Unavailable { .. } => {
                "check `storage.url` (`sqlite://PATH` or `postgres://USER:PASSWORD@HOST:PORT/DB`), \
                 that the server is running and that the credentials and file permissions are right"
            }
            StoreError::MigrationFailed { .. } => {
                "check the database user may create tables, and that no newer corral version \
                 migrated this database"
            }
            StoreError::QueryFailed { .. } => "check the store's log; retry if it was transient",
        }
    }
}

/// The printable name of a store and the secrets that must never be printed.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// The store as it may be shown.
    pub(crate) target: String,
    /// Strings to remove from any text before it is kept (raw and percent-decoded passwords).
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for a store shown as `target` that has no secret.
    pub(crate) fn plain(target: impl Into<String>) -> Self {
        Self {
            target: target.into(),
            secrets: Vec::new(),
        }
    }

    /// A redactor for a parsed server URL: the target keeps scheme, user, host, port and path,
    /// and drops the password and the whole query string (which may carry `password=`).
    pub(crate) fn for_url(url: &url::Url) -> Self {
        let mut secrets = Vec::new();
        let mut add = |raw: &str| {
            if !raw.is_empty() {
                secrets.push(raw.to_owned());
                match percent_decode(raw) {
                    Ok(decoded) if decoded != raw && !decoded.is_empty() => secrets.push(decoded),
                    _ => {}
                }
            }
        };
        if let Some(p) = url.password() {
            add(p);
        }
        for (key, value) in url.query_pairs() {
            if key == "password" {
                add(&value);
            }
        }
        // Longest first, so a password that contains another is removed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));

        let mut target = format!("{}://", url.scheme());
        if !url.username().is_empty() {
            target.push_str(url.username());
            target.push('@');
        }
        target.push_str(url.host_str().unwrap_or(""));
        if let Some(port) = url.port() {
            target.push_str(&format!(":{port}"));
        }
        target.push_str(url.path());
        Self { target, secrets }
    }

    /// `text` with every secret replaced by `***`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }

    pub(crate) fn unavailable(&self, reason: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            target: self.target.clone(),
            reason: self.scrub(&reason.to_string()),
        }
    }

    pub(crate) fn migration_failed(&self, reason: impl std::fmt::Display) -> StoreError {
        StoreError::MigrationFailed {
            target: self.target.clone(),
            reason: self.scrub(&reason.to_string()),
        }
    }

    /// Classifies a driver error met while running a statement: a lost connection or an
    /// exhausted pool is `store.unavailable`, anything else `store.query_failed`.
    pub(crate) fn query(&self, what: &'static str, err: sqlx::Error) -> StoreError {
        match &err {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => self.unavailable(format!("{what}: {err}")),
            sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::QueryFailed {
                what,
                reason: self.scrub(&format!("duplicate key, the row already exists: {db}")),
            },
            _ => StoreError::QueryFailed {
                what,
                reason: self.scrub(&err.to_string()),
            },
        }
    }
}

/// Decodes `%XX` escapes; `Err` on invalid escapes or invalid UTF-8.
fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(())?;
            let hex = std::str::from_utf8(hex).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}
