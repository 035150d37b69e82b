//! What commands start from: the config (path, load, diagnostics), the tokio runtime, the
//! server and client of a remote command, and the caller of a local one. Each is written once
//! here, and fails with the `CliError` `run()` prints.

use std::path::{Path, PathBuf};

use corral_client::Client;
use corral_config::Loaded;

use crate::{CliError, Exit};

/// The default server when neither `--server` nor `$CORRAL_SERVER` is set.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9000";

/// The config path: the flag, else `$CORRAL_CONFIG`, else `./corral.yaml`.
pub fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("CORRAL_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("corral.yaml"))
}

/// Loads the config at `path` for a command that authenticates nobody and calls no provider
/// (everything but `serve`): the secrets that are set are read, the unset ones stand in
/// ([`corral_config::OfflineEnv`]), so a command needs only the secrets it really uses. A
/// config that does not load is its rendered diagnostics.
pub fn load_at(path: &Path) -> Result<Loaded, CliError> {
    corral_config::load_file_with_env(path, &corral_config::OfflineEnv::default())
        .map_err(|e| CliError::config(&e))
}

/// Loads the config at `path` for `corral serve`: every secret it names must be set.
pub fn load_for_serve(path: &Path) -> Result<Loaded, CliError> {
    corral_config::load_file(path).map_err(|e| CliError::config(&e))
}

/// Loads the config the flag (or `$CORRAL_CONFIG`, or `./corral.yaml`) names.
pub fn load(flag: Option<PathBuf>) -> Result<Loaded, CliError> {
    load_at(&config_path(flag))
}

/// Loads the config when one is named (the flag or `$CORRAL_CONFIG`), `required`, or
/// `./corral.yaml` exists; else `None`, for commands that have defaults without one.
pub fn load_if_any(flag: Option<PathBuf>, required: bool) -> Result<Option<Loaded>, CliError> {
    let named = flag.is_some() || std::env::var_os("CORRAL_CONFIG").is_some();
    let path = config_path(flag);
    if named || required || path.exists() {
        load_at(&path).map(Some)
    } else {
        Ok(None)
    }
}

/// How many threads a command's runtime drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One: a command that waits on one thing at a time (a call, a request, a run).
    One,
    /// One per core: a server, or an MCP session with calls in flight.
    Many,
}

/// A tokio runtime with I/O and timers.
pub fn tokio_runtime(threads: Threads) -> std::io::Result<tokio::runtime::Runtime> {
    match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::Many => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()
}

/// A tokio runtime, or the error saying it could not start.
pub fn runtime(threads: Threads) -> Result<tokio::runtime::Runtime, CliError> {
    tokio_runtime(threads).map_err(|e| CliError::usage(format!("cannot start the runtime: {e}")))
}

/// The server URL: the flag, else `$CORRAL_SERVER`, else `http://127.0.0.1:9000`.
pub fn server_url(flag: Option<String>) -> String {
    flag.or_else(|| {
        std::env::var("CORRAL_SERVER")
            .ok()
            .filter(|s| !s.is_empty())
    })
    .unwrap_or_else(|| DEFAULT_SERVER.to_owned())
}

/// A client for `server` (flag, `$CORRAL_SERVER`, default) with the token from `token_env`
/// (default `$CORRAL_TOKEN`, if set).
pub fn remote_client(server: Option<String>, token_env: Option<&str>) -> Result<Client, CliError> {
    let server = server_url(server);
    let token = match token_env {
        Some(name) => match std::env::var(name) {
            Ok(t) if !t.is_empty() => Some(t),
            _ => {
                return Err(CliError::usage(format!(
                    "`--token-env {name}` names a variable that is unset or empty"
                )));
            }
        },
        None => std::env::var("CORRAL_TOKEN").ok().filter(|t| !t.is_empty()),
    };
    Client::new(&server, token).map_err(CliError::usage)
}

/// A client of `server` with the token from `token_env`, and a runtime to drive it: what every
/// command that talks to a running server starts with.
pub fn remote(
    server: Option<String>,
    token_env: Option<&str>,
) -> Result<(Client, tokio::runtime::Runtime), CliError> {
    Ok((remote_client(server, token_env)?, runtime(Threads::One)?))
}

/// A failed request to a server: a refusal with its code (exit 1), anything else (the server
/// unreachable, a malformed answer) exit 2.
pub fn remote_error(e: corral_client::ClientError) -> CliError {
    match e {
        corral_client::ClientError::Api { code, message, .. } => {
            CliError::coded(&code, message).with_exit(Exit::Findings)
        }
        e => CliError::usage(e),
    }
}

/// The caller of a local call: the token `--principal` names (its principal, and its run if it
/// is run-scoped), or anonymous when the config has no auth.
pub fn local_caller(
    loaded: &Loaded,
    wanted: Option<&str>,
) -> Result<corral_guard::Caller, CliError> {
    let ids = || {
        loaded
            .tokens
            .iter()
            .map(|t| format!("`{}`", t.principal.id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match wanted {
        Some(id) => loaded
            .tokens
            .iter()
            .find(|t| t.principal.id == id)
            .map(|t| {
                corral_guard::Caller::new(t.principal.clone())
                    .with_run(t.run.clone())
                    .with_record(t.record)
            })
            .ok_or_else(|| {
                CliError::usage(if loaded.tokens.is_empty() {
                    format!(
                        "`--principal {id}`: the config has no `auth.tokens`; drop `--principal` to call as anonymous"
                    )
                } else {
                    format!(
                        "`--principal {id}` is not a token id of the config; its tokens are: {}",
                        ids()
                    )
                })
            }),
        None if loaded.tokens.is_empty() && loaded.config.auth.jwt.is_none() => {
            Ok(corral_guard::Caller::new(corral_policy::Principal::anonymous()))
        }
        None if loaded.tokens.is_empty() => Err(CliError::usage(
            "the config authenticates with JWT only, so there is no anonymous caller; add a static token and pass `--principal ID`, or call the server",
        )),
        None => Err(CliError::usage(format!(
            "the config has tokens, so there is no anonymous caller; pass `--principal ID` (one of: {})",
            ids()
        ))),
    }
}

/// The caller whose token (static or JWT) is `token`, read from the variable `var`, checked as
/// the server checks a bearer token.
pub fn token_caller(
    loaded: &Loaded,
    var: &str,
    token: &str,
) -> Result<corral_guard::Caller, CliError> {
    let auth = corral_runtime::compose::authenticator(loaded).map_err(CliError::usage)?;
    auth.authenticate_token(Some(token.trim())).map_err(|e| {
        CliError::coded(
            e.code,
            format!(
                "the token in ${var}: {}; fix the variable, or pass `--principal ID`",
                e.message
            ),
        )
    })
}

/// The directory `--root` names (made absolute), else the current directory.
pub fn root_dir(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    match flag {
        Some(r) => Ok(std::path::absolute(r).unwrap_or_else(|_| r.to_path_buf())),
        None => std::env::current_dir().map_err(|e| {
            CliError::usage(format!(
                "cannot read the current directory: {e}; pass `--root DIR`"
            ))
        }),
    }
}
