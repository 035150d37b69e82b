//! `corral mcp`: serve the config's ops as MCP tools over stdio, for one local principal: the
//! token `--principal` names; else the caller whose token (static or JWT) is in `$CORRAL_TOKEN`
//! (`--token-env`), checked like a bearer token; else anonymous when the config has no auth.
//! Every call goes through the same guard chain and audit as `corral serve`.

use std::path::PathBuf;

use corral_mcp::CorralMcp;
use corral_mcp::rmcp::ServiceExt;

use crate::Exit;

/// The flags of `corral mcp`.
#[derive(Debug)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub principal: Option<String>,
    pub token_env: String,
}

pub fn run(a: Args) -> Exit {
    let path = super::config_path(a.config.clone());
    let loaded = match super::load(&path) {
        Ok(l) => l,
        Err(e) => {
            eprint!("{}", e.render());
            return Exit::Error;
        }
    };
    let token = std::env::var(&a.token_env)
        .ok()
        .filter(|t| !t.trim().is_empty());
    let caller = match (&a.principal, token) {
        (None, Some(token)) => {
            let auth = match corral_runtime::compose::authenticator(&loaded) {
                Ok(auth) => auth,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Exit::Error;
                }
            };
            match auth.authenticate_token(Some(token.trim())) {
                Ok(caller) => caller,
                Err(e) => {
                    eprintln!(
                        "error[{}]: the token in ${}: {}; fix the variable, or pass `--principal ID`",
                        e.code, a.token_env, e.message
                    );
                    return Exit::Error;
                }
            }
        }
        _ => match super::call::local_caller(&loaded, a.principal.as_deref()) {
            Ok(caller) => caller,
            Err(e) => {
                eprintln!("error: {e}");
                return Exit::Error;
            }
        },
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return Exit::Error;
        }
    };
    rt.block_on(async move {
        let options = corral_runtime::RuntimeOptions::long_lived();
        let runtime = match corral_runtime::Runtime::build(&loaded, options).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error[{}]: {e}", e.code());
                return Exit::Error;
            }
        };
        let handler = CorralMcp::for_caller(runtime.gateway().clone(), caller);
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
                    Ok(_) => Exit::Ok,
                    Err(e) => {
                        eprintln!("error: the MCP session failed: {e}");
                        Exit::Error
                    }
                }
            }
            Err(e) => {
                eprintln!("error: the MCP session did not start: {e}");
                Exit::Error
            }
        };
        runtime.close().await;
        code
    })
}
