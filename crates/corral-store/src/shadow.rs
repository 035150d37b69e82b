//! Shadow evaluations (issue 15 items 3-5, migration 0013): N variants x M recorded tasks
//! re-run as replay runs, one row per evaluation, owned by a tenant. The store keeps what the lab
//! gives it: the tasks and variants asked for, the run ids per (variant, task), the pairs a
//! ceiling stopped, and the lab's report (JSON); it is created `running` and updated as runs
//! finish, so a poller sees progress.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Store;
use crate::lab::{
    LabStoreError, Page, Paged, check_plain, cursor_binds, from_json, json_text, not_found,
    page_of, uuid7,
};

/// A shadow evaluation as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shadow {
    /// Its id.
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// Who started it.
    pub principal: String,
    /// `running`, `completed`, `stopped_by_ceiling`, `failed`, or `interrupted` (the process
    /// running it stopped first: found at a restart, migration 0014).
    pub status: String,
    /// N variants x M tasks.
    pub planned: u64,
    /// Runs that ran (finished), so far.
    pub ran: u64,
    /// The recorded tasks (their run ids), in request order.
    pub tasks: Vec<String>,
    /// The variant labels, in request order.
    pub variants: Vec<String>,
    /// Per variant, the run id of each task (`null` where none ran).
    pub runs: Value,
    /// The (variant, task) pairs that did not run.
    pub not_run: Value,
    /// The lab's report: per run its divergence from the recording, the metering, the ceilings.
    pub report: Value,
    /// When it started (ms since the epoch).
    pub created_ms: i64,
    /// When it last changed.
    pub updated_ms: i64,
    /// When it ended; `None` while running.
    pub finished_ms: Option<i64>,
}

/// What changes as a shadow evaluation runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowProgress {
    /// Its status.
    pub status: String,
    /// Runs finished so far.
    pub ran: u64,
    /// Per variant, the run id of each task.
    pub runs: Value,
    /// The pairs that did not run.
    pub not_run: Value,
    /// The report.
    pub report: Value,
    /// Set when it ends.
    pub finished: bool,
}

macro_rules! shadow_columns {
    () => {
        "tenant, id, principal, status, planned, ran, tasks, variants, runs, not_run, report, \
         created_ms, updated_ms, finished_ms"
    };
}

const INSERT_SHADOW: &str = concat!(
    "INSERT INTO lab_shadows (",
    shadow_columns!(),
    ", worker) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
);
/// Only a `running` evaluation changes: one a restart marked `interrupted` stays so. Its end
/// clears its worker.
const UPDATE_SHADOW: &str = "UPDATE lab_shadows SET status = $3, ran = $4, runs = $5, \
     not_run = $6, report = $7, updated_ms = $8, finished_ms = $9, \
     worker = CASE WHEN $9 IS NULL THEN worker ELSE NULL END \
     WHERE tenant = $1 AND id = $2 AND status = 'running'";
const GET_SHADOW: &str = concat!(
    "SELECT ",
    shadow_columns!(),
    " FROM lab_shadows WHERE tenant = $1 AND id = $2"
);
const LIST_SHADOWS: &str = concat!(
    "SELECT ",
    shadow_columns!(),
    " FROM lab_shadows WHERE tenant = $1 \
     AND ($2 IS NULL OR created_ms < $2 OR (created_ms = $2 AND id < $3)) \
     ORDER BY created_ms DESC, id DESC LIMIT $4"
);

#[derive(sqlx::FromRow)]
struct ShadowRow {
    tenant: String,
    id: String,
    principal: String,
    status: String,
    planned: i64,
    ran: i64,
    tasks: String,
    variants: String,
    runs: String,
    not_run: String,
    report: String,
    created_ms: i64,
    updated_ms: i64,
    finished_ms: Option<i64>,
}

crate::lab::keyed!(Shadow => created_ms);

impl ShadowRow {
    fn into_shadow(self) -> Result<Shadow, LabStoreError> {
        let id = self.id;
        Ok(Shadow {
            tasks: from_json("shadow tasks", &id, &self.tasks)?,
            variants: from_json("shadow variants", &id, &self.variants)?,
            runs: from_json("shadow runs", &id, &self.runs)?,
            not_run: from_json("shadow not_run", &id, &self.not_run)?,
            report: from_json("shadow report", &id, &self.report)?,
            tenant: self.tenant,
            principal: self.principal,
            status: self.status,
            planned: u64::try_from(self.planned).unwrap_or(0),
            ran: u64::try_from(self.ran).unwrap_or(0),
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            finished_ms: self.finished_ms,
            id,
        })
    }
}

impl Store {
    /// Starts a shadow evaluation of `tenant` (`running`, nothing ran yet).
    pub async fn create_shadow(
        &self,
        tenant: &str,
        principal: &str,
        tasks: &[String],
        variants: &[String],
        planned: u64,
        now_ms: i64,
    ) -> Result<Shadow, LabStoreError> {
        check_plain(&[("the tenant", tenant), ("the principal", principal)])?;
        let id = uuid7();
        let q = self.lab_err("record a shadow evaluation");
        let planned_i = i64::try_from(planned).unwrap_or(i64::MAX);
        on_pool!(&self.pool, p => sqlx::query(INSERT_SHADOW)
            .bind(tenant)
            .bind(id.as_str())
            .bind(principal)
            .bind("running")
            .bind(planned_i)
            .bind(0_i64)
            .bind(json_text(tasks))
            .bind(json_text(variants))
            .bind("{}")
            .bind("[]")
            .bind("{}")
            .bind(now_ms)
            .bind(now_ms)
            .bind(None::<i64>)
            .bind(self.worker())
            .execute(p)
            .await
            .map(|_| ())
            .map_err(q)?);
        Ok(Shadow {
            id,
            tenant: tenant.to_owned(),
            principal: principal.to_owned(),
            status: "running".to_owned(),
            planned,
            ran: 0,
            tasks: tasks.to_vec(),
            variants: variants.to_vec(),
            runs: Value::Object(serde_json::Map::new()),
            not_run: Value::Array(Vec::new()),
            report: Value::Object(serde_json::Map::new()),
            created_ms: now_ms,
            updated_ms: now_ms,
            finished_ms: None,
        })
    }

    /// Records a shadow evaluation's progress (or its end, with `finished`).
    pub async fn update_shadow(
        &self,
        tenant: &str,
        id: &str,
        progress: &ShadowProgress,
        now_ms: i64,
    ) -> Result<(), LabStoreError> {
        let q = self.lab_err("update a shadow evaluation");
        let done = on_pool!(&self.pool, p => sqlx::query(UPDATE_SHADOW)
            .bind(tenant)
            .bind(id)
            .bind(progress.status.as_str())
            .bind(i64::try_from(progress.ran).unwrap_or(i64::MAX))
            .bind(json_text(&progress.runs))
            .bind(json_text(&progress.not_run))
            .bind(json_text(&progress.report))
            .bind(now_ms)
            .bind(progress.finished.then_some(now_ms))
            .execute(p)
            .await
            .map(|r| r.rows_affected())
            .map_err(q)?);
        if done == 0 {
            return match self.get_shadow(tenant, id).await? {
                Some(s) => Err(LabStoreError::Invalid {
                    reason: format!(
                        "shadow evaluation {id:?} is `{}`, no longer running; start a new one",
                        s.status
                    ),
                }),
                None => Err(not_found("shadow evaluation", tenant, id)),
            };
        }
        Ok(())
    }

    /// A shadow evaluation of `tenant`; `None` if `tenant` has none with `id`.
    pub async fn get_shadow(
        &self,
        tenant: &str,
        id: &str,
    ) -> Result<Option<Shadow>, LabStoreError> {
        let q = self.lab_err("read a shadow evaluation");
        let row: Option<ShadowRow> = on_pool!(&self.pool, p => sqlx::query_as(GET_SHADOW)
            .bind(tenant)
            .bind(id)
            .fetch_optional(p)
            .await
            .map_err(q)?);
        row.map(ShadowRow::into_shadow).transpose()
    }

    /// A page of `tenant`'s shadow evaluations, newest first.
    pub async fn list_shadows(
        &self,
        tenant: &str,
        page: &Page,
    ) -> Result<Paged<Shadow>, LabStoreError> {
        let q = self.lab_err("list shadow evaluations");
        let (after_ms, after_id) = cursor_binds(page);
        let rows: Vec<ShadowRow> = on_pool!(&self.pool, p => sqlx::query_as(LIST_SHADOWS)
            .bind(tenant)
            .bind(after_ms)
            .bind(after_id)
            .bind(i64::from(page.rows()) + 1)
            .fetch_all(p)
            .await
            .map_err(q)?);
        page_of(rows, page, ShadowRow::into_shadow)
    }
}
