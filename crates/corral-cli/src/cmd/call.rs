//! `corral call`: call one op, on a server (`POST /ops/{id}` through `corral-client`) or
//! in-process with `--local` (the same guard chain, audit included, without HTTP).
//!
//! Arguments are `name=value`. A value that looks like JSON (a number, `true`, `false`, an
//! array `[...]`, an object `{...}` or a quoted string `"..."`) is sent as that JSON; anything
//! else, or JSON that does not parse, is sent as a string. `argv=...` takes a JSON array or
//! shell words (`argv='pytest -q tests'`).

use std::io::Write;
use std::path::PathBuf;

use corral_client::{ClientError, Reply};
use serde_json::{Map, Value, json};

use crate::context::{self, Threads};
use crate::{CliError, CliResult, Exit, Format};

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
    /// Exit 0 even when the program the op ran failed.
    pub exit_zero: bool,
}

/// The exit code of a call whose op ran a program that failed (a non-zero `exit_code`, or
/// `timed_out`), its result printed: distinct from a refusal (1) and bad usage (2).
pub const EXIT_PROGRAM_FAILED: u8 = 3;

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
    /// The code's further fields (`confirmation.required`: `action_id`, `approve`, ...).
    details: serde_json::Map<String, Value>,
}

/// `exit`, or [`EXIT_PROGRAM_FAILED`] when the program the op ran failed (unless
/// `--exit-zero`).
fn failed_exit(a: &Args, result: &Value, exit: Exit) -> Exit {
    if !a.exit_zero && program_failed(result) {
        Exit::Code(EXIT_PROGRAM_FAILED)
    } else {
        exit
    }
}

/// Whether a result says the program the op ran failed.
fn program_failed(result: &Value) -> bool {
    result["exit_code"].as_i64().is_some_and(|c| c != 0) || result["timed_out"] == true
}

fn report_success(op: &str, request_id: &str, result: &Value, format: Format) -> CliResult {
    let doc = match format {
        Format::Human => result.clone(),
        Format::Json => json!({"ok": true, "op": op, "request_id": request_id, "result": result}),
    };
    let s = serde_json::to_string_pretty(&doc)
        .map_err(|e| CliError::usage(format!("cannot print the result: {e}")))?;
    outln!("{s}");
    Ok(Exit::Ok)
}

/// A download that could not be written to stdout.
fn write_failed(e: &std::io::Error) -> CliError {
    CliError::usage(format!("cannot write the download to stdout: {e}"))
}

fn report_bytes(bytes: &[u8]) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| write_failed(&e))?;
    Ok(Exit::Ok)
}

/// A refused call: its code and message on stderr (exit 1), or the JSON document on stdout.
fn report_failure(op: &str, f: &Failure, format: Format) -> CliResult {
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
            // The server's strings are not trusted to be plain: a control character would
            // drive the terminal (a remote server is anyone's).
            let safe = crate::cmd::sandbox::printable_text;
            Err(CliError::coded(
                &crate::cmd::audit::printable(&f.code),
                format!("{}{retry}{}", safe(&f.message), safe(&rid)),
            )
            .with_exit(Exit::Findings))
        }
        Format::Json => {
            let mut doc = f.details.clone();
            for (k, v) in [
                ("ok", json!(false)),
                ("status", json!(f.status)),
                ("error", json!(f.message)),
                ("type", json!(f.kind)),
                ("code", json!(f.code)),
                ("op", json!(op)),
                ("request_id", json!(f.request_id)),
                ("retry_after", json!(f.retry_after_secs)),
            ] {
                doc.insert(k.to_owned(), v);
            }
            crate::output::print_json(&Value::Object(doc));
            Ok(Exit::Findings)
        }
    }
}

/// Copies a local download to stdout in chunks.
async fn copy_to_stdout(body: &mut (dyn tokio::io::AsyncRead + Send + Unpin)) -> CliResult {
    use tokio::io::AsyncReadExt;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match body.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => out.write_all(&buf[..n]).map_err(|e| write_failed(&e))?,
            Err(e) => {
                return Err(
                    CliError::usage(format!("the download failed: {e}")).with_exit(Exit::Findings)
                );
            }
        }
    }
    out.flush().map_err(|e| write_failed(&e))?;
    Ok(Exit::Ok)
}

/// Runs `corral call`.
pub fn run(a: Args) -> CliResult {
    let args = parse_args(&a.args).map_err(|e| {
        CliError::usage(format!(
            "{e}; arguments are `name=value` (JSON values are parsed)"
        ))
    })?;
    if a.local {
        run_local(&a, args)
    } else {
        run_remote(&a, args)
    }
}

/// Says on stderr that the answer is an approved call's stored outcome: it did not run again.
fn note_replayed(op: &str) {
    eprintln!(
        "note: this approved call to `{}` had run already; this is its stored outcome (it did not run again)",
        crate::cmd::audit::printable(op)
    );
}

fn run_remote(a: &Args, args: Value) -> CliResult {
    let server = context::server_url(a.server.clone());
    let (client, rt) = context::remote(a.server.clone(), a.token_env.as_deref())?;
    match rt.block_on(client.call_reply(&a.op, args)) {
        Ok(Reply::Json {
            op,
            request_id,
            result,
            replayed,
        }) => {
            if replayed {
                note_replayed(&op);
            }
            report_success(&op, &request_id, &result, a.format).map(|e| failed_exit(a, &result, e))
        }
        Ok(Reply::Bytes { bytes, .. }) => report_bytes(&bytes),
        Err(ClientError::Api {
            status,
            code,
            message,
            request_id,
            retry_after,
            details,
        }) => {
            if details.get("replayed") == Some(&json!(true)) {
                note_replayed(&a.op);
            }
            report_failure(
                &a.op,
                &Failure {
                    status,
                    kind: code.split('.').next().unwrap_or("error").to_owned(),
                    code,
                    message,
                    request_id,
                    retry_after_secs: retry_after.map(|d| d.as_secs()),
                    details,
                },
                a.format,
            )
        }
        Err(e @ ClientError::Transport { .. }) => Err(CliError::usage(format!(
            "{server}: {e}; is `corral serve` running there? (--server, $CORRAL_SERVER)"
        ))),
        Err(e) => Err(CliError::usage(format!("{server}: {e}"))),
    }
}

fn run_local(a: &Args, args: Value) -> CliResult {
    let loaded = context::load(a.config.clone())?;
    let caller = context::local_caller(&loaded, a.principal.as_deref())?;
    let rt = context::runtime(Threads::One)?;
    // A built-in or custom op needs no upstream server and no purger; an upstream tool
    // (`mcp.<server>.<tool>`) needs its server, and only that one.
    let mut options = corral_runtime::RuntimeOptions::one_shot();
    if let Some(server) =
        a.op.strip_prefix("mcp.")
            .and_then(|rest| rest.split('.').next())
    {
        options = options.with_upstream(server);
    }
    rt.block_on(async move {
        let runtime = corral_runtime::Runtime::build(&loaded, options)
            .await
            .map_err(|e| CliError::coded(e.code(), &e))?;
        let request_id = uuid::Uuid::now_v7().to_string();
        let (reply, outcome) = runtime
            .gateway()
            .call_traced(
                corral_guard::Call {
                    caller,
                    op: a.op.clone(),
                    args,
                    request_id: request_id.clone(),
                },
                corral_guard::CallOptions::default(),
            )
            .await;
        if outcome == corral_guard::audit::Outcome::Replayed {
            note_replayed(&a.op);
        }
        let code = match reply {
            corral_guard::Reply::Json(v) => {
                report_success(&a.op, &request_id, &v, a.format).map(|e| failed_exit(a, &v, e))
            }
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
                    details: match &r.details {
                        Some(Value::Object(m)) => m.clone(),
                        _ => serde_json::Map::new(),
                    },
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
