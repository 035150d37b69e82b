//! `corral mcp`: serve the config's ops as MCP tools over stdio, for one local principal: the
//! token `--principal` names; else the caller whose token (static or JWT) is in `$CORRAL_TOKEN`
//! (`--token-env`), checked like a bearer token; else anonymous when the config has no auth.
//! Every call goes through the same guard chain and audit as `corral serve`.

use std::path::PathBuf;

use corral_mcp::CorralMcp;
use corral_mcp::rmcp::ServiceExt;

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit};

/// The flags of `corral mcp`.
#[derive(Debug)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub principal: Option<String>,
    pub token_env: String,
}

/// Runs `corral mcp` until the client ends the session.
pub fn run(a: Args) -> CliResult {
    let loaded = context::load(a.config.clone())?;
    let token = std::env::var(&a.token_env)
        .ok()
        .filter(|t| !t.trim().is_empty());
    let caller = match (&a.principal, token) {
        (None, Some(token)) => context::token_caller(&loaded, &a.token_env, &token)?,
        _ => context::local_caller(&loaded, a.principal.as_deref())?,
    };
    let rt = context::runtime(Threads::Many)?;
    rt.block_on(async move {
        let options = corral_runtime::RuntimeOptions::long_lived();
        let runtime = corral_runtime::Runtime::build(&loaded, options)
            .await
            .map_err(|e| CliError::coded(e.code(), &e))?;
        let handler = CorralMcp::for_caller(runtime.gateway().clone(), caller)
            .with_lab(runtime.lab().clone())
            .with_underscored_names(loaded.config.mcp.underscored_tool_names);
        let code = match handler
            .clone()
            .serve(corral_mcp::rmcp::transport::stdio())
            .await
        {
            Ok(running) => {
                // Unscoped notifications are for sessions that began with `initialize` (rmcp
                // knows their client's info); a client on the subscription protocol asks with
                // `subscriptions/listen` instead.
                let announcer = running.peer().peer_info().is_some().then(|| {
                    let peer = running.peer().clone();
                    tokio::spawn(async move { handler.announce_changes(peer).await })
                });
                let ended = running.waiting().await;
                if let Some(a) = announcer {
                    a.abort();
                }
                match ended {
                    Ok(_) => Ok(Exit::Ok),
                    Err(e) => Err(CliError::usage(format!("the MCP session failed: {e}"))),
                }
            }
            Err(e) => Err(CliError::usage(format!(
                "the MCP session did not start: {e}"
            ))),
        };
        runtime.close().await;
        code
    })
}
