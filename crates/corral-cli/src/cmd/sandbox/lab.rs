//! Where a lab command's requests go: a server's `/v1/sandbox/...` routes through the typed
//! client, or (`--local`) the runtime's lab in-process. Both answer the client's types, so the
//! commands print the same thing either way.

use corral_client::Client;
use corral_client::sandbox::{
    Comparison, ComparisonRequest, Outputs, Page, PageRequest, Recording, RecordingDetail,
    ReplayReport, ReplayRequest, Run, RunRequest, Scenario, ScenarioRequest, ScenarioSummary,
    Tournament, TournamentRequest,
};
use corral_lab::service::{self, LabError, LabService, PageQuery};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Conn;
use crate::context::{self, Threads};
use crate::{CliError, Exit};

/// The lab a command talks to.
#[derive(Debug)]
pub(crate) enum Lab {
    /// A running server.
    Remote {
        /// The typed client.
        client: Client,
        /// The runtime that drives it.
        rt: tokio::runtime::Runtime,
    },
    /// The config's lab, in-process (`--local`): the runtime's `LabService`, as `caller`.
    Local {
        /// The app over the runtime built from the config (its gateway, audit sinks, store,
        /// and the links it serves to the lab's external programs).
        app: corral_server::AppState,
        /// Who acts.
        caller: corral_guard::Caller,
        /// The tokio runtime that drives it.
        rt: tokio::runtime::Runtime,
    },
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The audit events of a local action are flushed before the command ends.
        if let Lab::Local { app, rt, .. } = self {
            rt.block_on(app.runtime().close());
        }
    }
}

/// A value of one serde type as another (the client's wire types and the service's): both
/// are the same JSON.
fn convert<T: DeserializeOwned>(v: &impl Serialize, what: &str) -> Result<T, CliError> {
    serde_json::to_value(v)
        .and_then(serde_json::from_value)
        .map_err(|e| CliError::usage(format!("the lab's {what} cannot be read: {e}")))
}

/// A refusal of the local lab: its code, exit 1 (as a server's refusal).
fn refused(e: LabError) -> CliError {
    CliError::coded(e.code, e.message).with_exit(Exit::Findings)
}

/// A request body as the service reads it (its `parse`, so a bad field says what a server
/// would).
fn body<T: for<'de> serde::Deserialize<'de>>(
    what: &str,
    req: &impl Serialize,
) -> Result<T, CliError> {
    let v = serde_json::to_value(req).unwrap_or(Value::Null);
    service::parse(what, v).map_err(refused)
}

fn page_query(page: &PageRequest) -> PageQuery {
    PageQuery {
        limit: page.limit.unwrap_or(0),
        after: page.after.clone(),
    }
}

/// A fresh request id for the audit of a local action.
fn rid() -> String {
    uuid::Uuid::now_v7().to_string()
}

impl Lab {
    /// The lab `conn` names: a server, or the config's lab in-process.
    pub(crate) fn open(conn: &Conn) -> Result<Lab, CliError> {
        if conn.local {
            let loaded = context::load(conn.config.clone())?;
            let caller = context::local_caller(&loaded, conn.principal.as_deref())?;
            let rt = context::runtime(Threads::One)?;
            let runtime = rt
                .block_on(corral_runtime::Runtime::build(
                    &loaded,
                    corral_runtime::RuntimeOptions::one_shot(),
                ))
                .map_err(|e| CliError::coded(e.code(), &e))?;
            // The app (not only the runtime), so an external program's link has its API.
            return Ok(Lab::Local {
                app: corral_server::local_state(runtime, &loaded),
                caller,
                rt,
            });
        }
        let client = context::remote_client(conn.server.clone(), conn.token_env.as_deref())?;
        Ok(Lab::Remote {
            client,
            rt: context::runtime(Threads::One)?,
        })
    }

    /// One request, to the server or to the local lab; the local answer is read back as the
    /// client's type (`what` names it in an error).
    fn either<T, L>(
        &self,
        what: &str,
        remote: impl AsyncFnOnce(&Client) -> Result<T, corral_client::ClientError>,
        local: impl AsyncFnOnce(&LabService, &corral_guard::Caller) -> Result<L, CliError>,
    ) -> Result<T, CliError>
    where
        T: DeserializeOwned,
        L: Serialize,
    {
        match self {
            Lab::Remote { client, rt } => {
                rt.block_on(remote(client)).map_err(context::remote_error)
            }
            Lab::Local { app, caller, rt } => {
                convert(&rt.block_on(local(app.runtime().lab(), caller))?, what)
            }
        }
    }

    pub(crate) fn create_scenario(&self, req: &ScenarioRequest) -> Result<Scenario, CliError> {
        self.either(
            "scenario",
            async |c| c.sandbox_create_scenario(req).await,
            async |lab, caller| {
                let b = body("a scenario", req)?;
                lab.create_scenario(caller, &rid(), b)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn update_scenario(
        &self,
        id: &str,
        req: &ScenarioRequest,
    ) -> Result<Scenario, CliError> {
        self.either(
            "scenario",
            async |c| c.sandbox_update_scenario(id, req).await,
            async |lab, caller| {
                let b = body("a scenario", req)?;
                lab.update_scenario(caller, &rid(), id, b)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn list_scenarios(
        &self,
        page: &PageRequest,
    ) -> Result<Page<ScenarioSummary>, CliError> {
        self.either(
            "scenarios",
            async |c| c.sandbox_list_scenarios(page).await,
            async |lab, caller| {
                lab.list_scenarios(caller, &rid(), &page_query(page))
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn scenario(&self, id: &str) -> Result<Scenario, CliError> {
        self.either(
            "scenario",
            async |c| c.sandbox_scenario(id).await,
            async |lab, caller| lab.get_scenario(caller, &rid(), id).await.map_err(refused),
        )
    }

    pub(crate) fn run(&self, scenario: &str, req: &RunRequest) -> Result<Run, CliError> {
        self.either(
            "run",
            async |c| c.sandbox_run(scenario, req).await,
            async |lab, caller| {
                let b = body("a run", req)?;
                lab.run(caller, &rid(), scenario, b).await.map_err(refused)
            },
        )
    }

    pub(crate) fn list_runs(
        &self,
        scenario: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<Run>, CliError> {
        self.either(
            "runs",
            async |c| c.sandbox_list_runs(scenario, page).await,
            async |lab, caller| {
                lab.list_runs(caller, &rid(), scenario, &page_query(page))
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn get_run(&self, id: &str) -> Result<Run, CliError> {
        self.either(
            "run",
            async |c| c.sandbox_get_run(id).await,
            async |lab, caller| lab.get_run(caller, &rid(), id).await.map_err(refused),
        )
    }

    pub(crate) fn list_recordings(&self, page: &PageRequest) -> Result<Page<Recording>, CliError> {
        self.either(
            "recordings",
            async |c| c.sandbox_list_recordings(page).await,
            async |lab, caller| {
                lab.list_recordings(caller, &rid(), &page_query(page))
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<RecordingDetail, CliError> {
        self.either(
            "recording",
            async |c| c.sandbox_recording(run_id, owner).await,
            async |lab, caller| {
                lab.get_recording(caller, &rid(), run_id, owner)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn delete_recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<Recording, CliError> {
        self.either(
            "recording",
            async |c| c.sandbox_delete_recording(run_id, owner).await,
            async |lab, caller| {
                lab.delete_recording(caller, &rid(), run_id, owner)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn replay(
        &self,
        run_id: &str,
        req: &ReplayRequest,
    ) -> Result<ReplayReport, CliError> {
        self.either(
            "replay",
            async |c| c.sandbox_replay(run_id, req).await,
            async |lab, caller| {
                let b = body("a replay", req)?;
                lab.replay(caller, &rid(), run_id, b).await.map_err(refused)
            },
        )
    }

    pub(crate) fn set_recording_input(
        &self,
        run_id: &str,
        steps: &Value,
    ) -> Result<Recording, CliError> {
        self.either(
            "recording",
            async |c| c.sandbox_set_recording_input(run_id, steps).await,
            async |lab, caller| {
                let b = body("a task input", &serde_json::json!({ "steps": steps }))?;
                lab.set_recording_input(caller, &rid(), run_id, b)
                    .await
                    .map_err(refused)
            },
        )
    }

    /// The recording as JSON lines, as the server (or the local lab) writes them.
    pub(crate) fn export_recording(
        &self,
        run_id: &str,
        owner: Option<&str>,
    ) -> Result<String, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_export_recording(run_id, owner))
                .map_err(context::remote_error),
            Lab::Local { app, caller, rt } => rt
                .block_on(
                    app.runtime()
                        .lab()
                        .export_recording(caller, &rid(), run_id, owner),
                )
                .map_err(refused),
        }
    }

    pub(crate) fn outputs(&self, id: &str) -> Result<Outputs, CliError> {
        self.either(
            "outputs",
            async |c| c.sandbox_run_outputs(id).await,
            async |lab, caller| {
                let items = lab.outputs(caller, &rid(), id).await.map_err(refused)?;
                Ok(serde_json::json!({ "items": items }))
            },
        )
    }

    pub(crate) fn list_comparisons(
        &self,
        page: &PageRequest,
    ) -> Result<Page<Comparison>, CliError> {
        self.either(
            "comparisons",
            async |c| c.sandbox_list_comparisons(page).await,
            async |lab, caller| {
                lab.list_comparisons(caller, &rid(), &page_query(page))
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn comparison(&self, id: &str) -> Result<Comparison, CliError> {
        self.either(
            "comparison",
            async |c| c.sandbox_comparison(id).await,
            async |lab, caller| {
                lab.get_comparison(caller, &rid(), id)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn compare(&self, req: &ComparisonRequest) -> Result<Comparison, CliError> {
        self.either(
            "comparison",
            async |c| c.sandbox_compare(req).await,
            async |lab, caller| {
                let b = body("a comparison", req)?;
                lab.compare(caller, &rid(), b).await.map_err(refused)
            },
        )
    }

    pub(crate) fn get_tournament(&self, id: &str) -> Result<Tournament, CliError> {
        self.either(
            "tournament",
            async |c| c.sandbox_tournament_get(id).await,
            async |lab, caller| {
                lab.get_tournament(caller, &rid(), id)
                    .await
                    .map_err(refused)
            },
        )
    }

    pub(crate) fn tournament(&self, req: &TournamentRequest) -> Result<Tournament, CliError> {
        self.either(
            "tournament",
            async |c| c.sandbox_tournament(req).await,
            async |lab, caller| {
                let b = body("a tournament", req)?;
                // The ceiling of judge calls: the config's `budgets.judge.max_calls`.
                lab.tournament(caller, &rid(), b, lab.max_judge_calls())
                    .await
                    .map_err(refused)
            },
        )
    }
}
