//! `corral call`: call one op, on a server (`POST /ops/{id}` through `corral-client`) or
//! in-process with `--local` (the same guard chain, audit included, without HTTP).
//!
//! Arguments are `name=value`. A value that looks like JSON (a number, `true`, `false`, an
//! array `[...]`, an object `{...}` or a quoted string `"..."`) is sent as that JSON; anything
//! else, or JSON that does not parse, is sent as a string. `argv=...` takes a JSON array or
//! shell words (`argv='pytest -q tests'`).

use std::io::Write;
use std::path::PathBuf;

use corral_client::{Client, ClientError, Reply};
use serde_json::{Map, Value, json};

use crate::{Exit, Format};

/// The default server when neither `--server` nor `$CORRAL_SERVER` is set.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9000";

/// The flags of `corral call`.
#[derive(Debug)]
pub struct Args {
    /// The op id.
    pub op: String,
    /// `name=value` arguments.
    pub args: Vec<String>,
    /// The server URL (remote calls).
    pub server: Option<String>,
    /// The variable holding the token (remote calls).
    pub token_env: Option<String>,
    /// Output format.
    pub format: Format,
    /// Call in-process instead of over HTTP.
    pub local: bool,
    /// The config (local calls).
    pub config: Option<PathBuf>,
    /// The token id to call as (local calls).
    pub principal: Option<String>,
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

/// Parses one value: JSON when it looks like JSON, else the text itself.
fn parse_value(name: &str, raw: &str) -> Result<Value, String> {
    let t = raw.trim();
    if name == "argv" {
        if t.starts_with('[') {
            return serde_json::from_str::<Value>(t)
                .map_err(|e| format!("`argv` is not a JSON array: {e}"));
        }
        return shlex::split(raw)
            .map(|w| Value::Array(w.into_iter().map(Value::String).collect()))
            .ok_or_else(|| "`argv` has unbalanced quotes".to_owned());
    }
    let looks_like_json = matches!(t, "true" | "false")
        || t.starts_with(['[', '{', '"'])
        || serde_json::from_str::<serde_json::Number>(t).is_ok();
    if looks_like_json && let Ok(v) = serde_json::from_str::<Value>(t) {
        return Ok(v);
    }
    Ok(Value::String(raw.to_owned()))
}

/// Parses `name=value` pairs into a JSON object.
pub fn parse_args(raw: &[String]) -> Result<Value, String> {
    let mut map = Map::new();
    for r in raw {
        let Some((name, value)) = r.split_once('=') else {
            return Err(format!("`{r}` is not `name=value`"));
        };
        if name.is_empty() {
            return Err(format!("`{r}` has no name before `=`"));
        }
        if map.contains_key(name) {
            return Err(format!("`{name}` is given twice"));
        }
        map.insert(name.to_owned(), parse_value(name, value)?);
    }
    Ok(Value::Object(map))
}

/// A refusal, as both paths report it.
struct Failure {
    status: u16,
    code: String,
    kind: String,
    message: String,
    request_id: Option<String>,
    retry_after_secs: Option<u64>,
}

fn report_success(op: &str, request_id: &str, result: &Value, format: Format) -> Exit {
    let doc = match format {
        Format::Human => result.clone(),
        Format::Json => json!({"ok": true, "op": op, "request_id": request_id, "result": result}),
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => {
            outln!("{s}");
            Exit::Ok
        }
        Err(e) => {
            eprintln!("error: cannot print the result: {e}");
            Exit::Error
        }
    }
}

fn report_bytes(bytes: &[u8]) -> Exit {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("error: cannot write the download to stdout: {e}");
            Exit::Error
        }
    }
}

fn report_failure(op: &str, f: &Failure, format: Format) -> Exit {
    match format {
        Format::Human => {
            let rid = f
                .request_id
                .as_deref()
                .map(|r| format!(" (request {r})"))
                .unwrap_or_default();
            let retry = f
                .retry_after_secs
                .map(|s| format!("; retry after {s} s"))
                .unwrap_or_default();
            eprintln!("error[{}]: {}{retry}{rid}", f.code, f.message);
        }
        Format::Json => crate::output::print_json(&json!({
            "ok": false,
            "status": f.status,
            "error": f.message,
            "type": f.kind,
            "code": f.code,
            "op": op,
            "request_id": f.request_id,
            "retry_after": f.retry_after_secs,
        })),
    }
    Exit::Findings
}

/// Copies a local download to stdout in chunks.
async fn copy_to_stdout(body: &mut (dyn tokio::io::AsyncRead + Send + Unpin)) -> Exit {
    use tokio::io::AsyncReadExt;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match body.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if let Err(e) = out.write_all(&buf[..n]) {
                    eprintln!("error: cannot write the download to stdout: {e}");
                    return Exit::Error;
                }
            }
            Err(e) => {
                eprintln!("error: the download failed: {e}");
                return Exit::Findings;
            }
        }
    }
    match out.flush() {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("error: cannot write the download to stdout: {e}");
            Exit::Error
        }
    }
}

pub fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the runtime: {e}");
            Exit::Error
        })
}

/// Runs `corral call`.
pub fn run(a: Args) -> Exit {
    let args = match parse_args(&a.args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}; arguments are `name=value` (JSON values are parsed)");
            return Exit::Error;
        }
    };
    if a.local {
        run_local(&a, args)
    } else {
        run_remote(&a, args)
    }
}

/// Reports a failed request to a server: a refusal with its code (exit 1), anything else (the
/// server unreachable, a malformed answer) exit 2.
pub(crate) fn report_remote_error(e: corral_client::ClientError) -> Exit {
    match e {
        corral_client::ClientError::Api { code, message, .. } => {
            eprintln!("error[{code}]: {message}");
            Exit::Findings
        }
        e => {
            eprintln!("error: {e}");
            Exit::Error
        }
    }
}

/// A client for `server` (flag, `$CORRAL_SERVER`, default) with the token from `token_env`
/// (default `$CORRAL_TOKEN`, if set).
pub fn remote_client(server: Option<String>, token_env: Option<&str>) -> Result<Client, Exit> {
    let server = server_url(server);
    let token = match token_env {
        Some(name) => match std::env::var(name) {
            Ok(t) if !t.is_empty() => Some(t),
            _ => {
                eprintln!("error: `--token-env {name}` names a variable that is unset or empty");
                return Err(Exit::Error);
            }
        },
        None => std::env::var("CORRAL_TOKEN").ok().filter(|t| !t.is_empty()),
    };
    Client::new(&server, token).map_err(|e| {
        eprintln!("error: {e}");
        Exit::Error
    })
}

/// A client of `server` with the token from `token_env`, and a runtime to drive it: what every
/// command that talks to a running server starts with.
pub(crate) fn remote(
    server: Option<String>,
    token_env: Option<&str>,
) -> Result<(Client, tokio::runtime::Runtime), Exit> {
    Ok((remote_client(server, token_env)?, runtime()?))
}

fn run_remote(a: &Args, args: Value) -> Exit {
    let server = server_url(a.server.clone());
    let (client, rt) = match remote(a.server.clone(), a.token_env.as_deref()) {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    match rt.block_on(client.call_reply(&a.op, args)) {
        Ok(Reply::Json {
            op,
            request_id,
            result,
        }) => report_success(&op, &request_id, &result, a.format),
        Ok(Reply::Bytes { bytes, .. }) => report_bytes(&bytes),
        Err(ClientError::Api {
            status,
            code,
            message,
            request_id,
            retry_after,
        }) => report_failure(
            &a.op,
            &Failure {
                status,
                kind: code.split('.').next().unwrap_or("error").to_owned(),
                code,
                message,
                request_id,
                retry_after_secs: retry_after.map(|d| d.as_secs()),
            },
            a.format,
        ),
        Err(e @ ClientError::Transport { .. }) => {
            eprintln!(
                "error: {server}: {e}; is `corral serve` running there? (--server, $CORRAL_SERVER)"
            );
            Exit::Error
        }
        Err(e) => {
            eprintln!("error: {server}: {e}");
            Exit::Error
        }
    }
}

/// The caller of a local call: the token `--principal` names (its principal, and its run if it
/// is run-scoped), or anonymous when the config has no auth.
pub(crate) fn local_caller(
    loaded: &corral_config::Loaded,
    wanted: Option<&str>,
) -> Result<corral_guard::Caller, String> {
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
            .map(|t| corral_guard::Caller::new(t.principal.clone()).with_run(t.run.clone()))
            .ok_or_else(|| {
                if loaded.tokens.is_empty() {
                    format!(
                        "`--principal {id}`: the config has no `auth.tokens`; drop `--principal` to call as anonymous"
                    )
                } else {
                    format!(
                        "`--principal {id}` is not a token id of the config; its tokens are: {}",
                        ids()
                    )
                }
            }),
        None if loaded.tokens.is_empty() && loaded.config.auth.jwt.is_none() => {
            Ok(corral_guard::Caller::new(corral_policy::Principal::anonymous()))
        }
        None if loaded.tokens.is_empty() => Err(
            "the config authenticates with JWT only, so there is no anonymous caller; add a static token and pass `--principal ID`, or call the server".to_owned(),
        ),
        None => Err(format!(
            "the config has tokens, so there is no anonymous caller; pass `--principal ID` (one of: {})",
            ids()
        )),
    }
}

fn run_local(a: &Args, args: Value) -> Exit {
    let path = super::config_path(a.config.clone());
    let loaded = match super::load(&path) {
        Ok(l) => l,
        Err(e) => {
            eprint!("{}", e.render());
            return Exit::Error;
        }
    };
    let caller = match local_caller(&loaded, a.principal.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Error;
        }
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // A built-in or custom op needs no upstream server and no purger; an upstream tool
    // (`mcp.<server>.<tool>`) needs its server.
    let mut options = corral_runtime::RuntimeOptions::one_shot();
    if a.op.starts_with("mcp.") {
        options = options.with_upstreams();
    }
    rt.block_on(async move {
        let runtime = match corral_runtime::Runtime::build(&loaded, options).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error[{}]: {e}", e.code());
                return Exit::Error;
            }
        };
        let request_id = uuid::Uuid::now_v7().to_string();
        let reply = runtime
            .gateway()
            .call(corral_guard::Call {
                caller,
                op: a.op.clone(),
                args,
                request_id: request_id.clone(),
            })
            .await;
        let code = match reply {
            corral_guard::Reply::Json(v) => report_success(&a.op, &request_id, &v, a.format),
            corral_guard::Reply::Stream(mut s) => copy_to_stdout(&mut s.body).await,
            corral_guard::Reply::Refused(r) => report_failure(
                &a.op,
                &Failure {
                    status: r.status(),
                    code: r.code.to_owned(),
                    kind: r.kind().to_owned(),
                    message: r.message.clone(),
                    request_id: Some(request_id.clone()),
                    retry_after_secs: r.retry_after.map(|d| d.as_secs_f64().ceil() as u64),
                },
                a.format,
            ),
        };
        runtime.close().await;
        code
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(pairs: &[&str]) -> Value {
        parse_args(&pairs.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn values_are_json_when_they_look_like_json() {
        let v = parse(&[
            "path=notes.txt",
            "n=42",
            "neg=-1.5",
            "flag=true",
            "list=[1, \"a\"]",
            "obj={\"k\": 1}",
            "quoted=\"123\"",
            "odd=[draft].txt",
            "zero=007",
            "empty=",
            "null=null",
        ]);
        assert_eq!(
            v,
            json!({
                "path": "notes.txt", "n": 42, "neg": -1.5, "flag": true, "list": [1, "a"],
                "obj": {"k": 1}, "quoted": "123", "odd": "[draft].txt", "zero": "007",
                "empty": "", "null": "null",
            })
        );
    }

    #[test]
    fn argv_takes_json_or_shell_words() {
        assert_eq!(
            parse(&["argv=[\"ls\", \"-la\"]"]),
            json!({"argv": ["ls", "-la"]})
        );
        assert_eq!(
            parse(&["argv=pytest -q 'tests/a b.py'"]),
            json!({"argv": ["pytest", "-q", "tests/a b.py"]})
        );
        assert!(parse_args(&["argv=[oops".to_owned()]).is_err());
        assert!(parse_args(&["argv='unbalanced".to_owned()]).is_err());
    }

    #[test]
    fn bad_pairs_are_usage_errors() {
        assert!(parse_args(&["novalue".to_owned()]).is_err());
        assert!(parse_args(&["=x".to_owned()]).is_err());
        assert!(parse_args(&["a=1".to_owned(), "a=2".to_owned()]).is_err());
        assert_eq!(parse(&["a=b=c"]), json!({"a": "b=c"}));
    }
}
