//! Graded tournaments (issue 15 item 6, migration 0012): a tournament's answer as the lab
//! computed it, kept as JSON, tenant-scoped and read back by id (another tenant's id reads as
//! none). The store does not read into it: the lab's `Tournament` is its shape.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Store;
use crate::error::StoreError;
use crate::lab::{LabStoreError, Page, Paged, cursor_binds, page_of};

crate::lab::keyed!(StoredTournament => created_ms);

/// A stored tournament.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTournament {
    /// Its id (UUID v7).
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// Who graded it.
    pub recorded_by: String,
    /// When it was stored (ms since the epoch).
    pub created_ms: i64,
    /// The tournament, as the lab answered it.
    pub details: Value,
}

#[derive(sqlx::FromRow)]
struct Row {
    tenant: String,
    id: String,
    recorded_by: String,
    details: String,
    created_ms: i64,
}

const INSERT: &str = "INSERT INTO lab_tournaments (tenant, id, recorded_by, details, created_ms) \
                      VALUES ($1, $2, $3, $4, $5)";
const GET: &str = "SELECT tenant, id, recorded_by, details, created_ms FROM lab_tournaments \
                   WHERE tenant = $1 AND id = $2";

const LIST: &str = "SELECT tenant, id, recorded_by, details, created_ms FROM lab_tournaments \
     WHERE tenant = $1 AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     ORDER BY created_ms DESC, id DESC LIMIT $4";

impl Row {
    fn into_stored(self) -> Result<StoredTournament, LabStoreError> {
        let details = serde_json::from_str(&self.details).map_err(|e| {
            LabStoreError::Store(StoreError::QueryFailed {
                what: "read a lab row",
                reason: format!("stored tournament {:?} cannot be read: {e}", self.id),
            })
        })?;
        Ok(StoredTournament {
            id: self.id,
            tenant: self.tenant,
            recorded_by: self.recorded_by,
            created_ms: self.created_ms,
            details,
        })
    }
}

impl Store {
    /// A page of `tenant`'s tournaments, newest first.
    pub async fn list_tournaments(
        &self,
        tenant: &str,
        page: &Page,
    ) -> Result<Paged<StoredTournament>, LabStoreError> {
        let q = self.lab_err("list lab tournaments");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<Row> = on_pool!(&self.pool, p => sqlx::query_as(LIST)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, Row::into_stored)
    }

    /// Stores a tournament of `tenant` graded by `recorded_by`.
    pub async fn append_tournament(
        &self,
        tenant: &str,
        recorded_by: &str,
        details: &Value,
        now_ms: i64,
    ) -> Result<StoredTournament, LabStoreError> {
        if let Some(name) = [("the tenant", tenant), ("the principal", recorded_by)]
            .iter()
            .find(|(_, v)| v.contains('\0'))
            .map(|(n, _)| *n)
        {
            return Err(LabStoreError::Invalid {
                reason: format!("{name} contains a NUL character; identifiers are plain text"),
            });
        }
        let id = uuid::Uuid::now_v7().to_string();
        let text = details.to_string();
        let q = self.lab_err("record a lab tournament");
        on_pool!(&self.pool, p => sqlx::query(INSERT)
            .bind(tenant)
            .bind(id.as_str())
            .bind(recorded_by)
            .bind(text.as_str())
            .bind(now_ms)
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q)?);
        Ok(StoredTournament {
            id,
            tenant: tenant.to_owned(),
            recorded_by: recorded_by.to_owned(),
            created_ms: now_ms,
            details: details.clone(),
        })
    }

    /// A tournament of `tenant`; `None` if `tenant` has no tournament `id`.
    pub async fn get_tournament(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<StoredTournament>, LabStoreError> {
        let q = self.lab_err("read a lab tournament");
        let row: Option<Row> = on_pool!(&self.pool, p => sqlx::query_as(GET)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(Row::into_stored).transpose()
    }
}
