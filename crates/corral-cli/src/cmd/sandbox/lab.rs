//! Where a lab command's requests go: a server's `/v1/sandbox/...` routes through the typed
//! client, or (`--local`) the runtime's lab in-process. Both answer the client's types, so the
//! commands print the same thing either way.

use corral_client::Client;
use corral_client::sandbox::{
    Comparison, ComparisonRequest, Outputs, Page, PageRequest, Run, RunRequest, Scenario,
    ScenarioRequest, ScenarioSummary,
};

use super::Conn;
use crate::CliError;
use crate::context::{self, Threads};

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
}

impl Lab {
    /// The lab `conn` names: a server, or the config's lab in-process.
    pub(crate) fn open(conn: &Conn) -> Result<Lab, CliError> {
        if conn.local {
            return Err(CliError::usage(
                "`--local` is not available for lab commands in this build; start `corral serve` and drop `--local`",
            ));
        }
        let client = context::remote_client(conn.server.clone(), conn.token_env.as_deref())?;
        Ok(Lab::Remote {
            client,
            rt: context::runtime(Threads::One)?,
        })
    }

    pub(crate) fn create_scenario(&self, req: &ScenarioRequest) -> Result<Scenario, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_create_scenario(req))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn list_scenarios(
        &self,
        page: &PageRequest,
    ) -> Result<Page<ScenarioSummary>, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_list_scenarios(page))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn scenario(&self, id: &str) -> Result<Scenario, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_scenario(id))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn run(&self, scenario: &str, req: &RunRequest) -> Result<Run, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_run(scenario, req))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn list_runs(
        &self,
        scenario: Option<&str>,
        page: &PageRequest,
    ) -> Result<Page<Run>, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_list_runs(scenario, page))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn get_run(&self, id: &str) -> Result<Run, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_get_run(id))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn outputs(&self, id: &str) -> Result<Outputs, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_run_outputs(id))
                .map_err(context::remote_error),
        }
    }

    pub(crate) fn compare(&self, req: &ComparisonRequest) -> Result<Comparison, CliError> {
        match self {
            Lab::Remote { client, rt } => rt
                .block_on(client.sandbox_compare(req))
                .map_err(context::remote_error),
        }
    }
}
