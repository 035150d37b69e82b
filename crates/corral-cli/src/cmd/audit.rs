//! `corral audit [--limit N] [--run R] [--op OP] [--principal ID] [--purpose P] [--after C]`: the
//! most recent audit events of a running server, newest first (the caller needs role admin); a
//! full page ends with the `--after` that gives the next one.

use serde_json::Value;

use crate::context;
use crate::{CliResult, Exit, Format, Remote};

/// `GET /audit`'s parameters besides `limit`, in the order `run` takes their values.
const FILTERS: [&str; 5] = ["run", "op", "principal", "purpose", "after"];

/// Fetches the events the given filters (`FILTERS`' values, in order) match and prints them,
/// one line each (or the server's JSON).
pub fn run(limit: u32, values: [Option<String>; 5], remote: Remote) -> CliResult {
    let format = remote.format;
    let filters: Vec<(&str, &str)> = FILTERS
        .iter()
        .zip(&values)
        .filter_map(|(name, v)| v.as_deref().map(|v| (*name, v)))
        .collect();
    let (client, rt) = context::remote(remote.server, remote.token_env.as_deref())?;
    match rt.block_on(client.audit(limit, &filters)) {
        Ok(v) => {
            match format {
                Format::Json => crate::output::print_json(&v),
                Format::Human => print_lines(&v),
            }
            Ok(Exit::Ok)
        }
        Err(e) => Err(context::remote_error(e)),
    }
}

/// One line per event: time (ms since the epoch), principal, op, outcome, status, code or rule,
/// run, purpose (`live` or `simulation`), request id, and the trace id when there is one; then,
/// when there are older events, the `--after` of the next page.
fn print_lines(v: &Value) {
    let events = v["events"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if events.is_empty() {
        outln!(
            "no audit events in tenant {}",
            printable(v["tenant"].as_str().unwrap_or("?"))
        );
        return;
    }
    // Stored values are printed with control characters escaped: an op id or principal id is
    // whatever a caller sent, and must not forge lines or drive the terminal.
    let s = |e: &Value, k: &str| printable(e[k].as_str().unwrap_or("-"));
    for e in events {
        let principal = match s(e, "principal_id").as_str() {
            "" => "(unauthenticated)".to_owned(),
            p => p.to_owned(),
        };
        let why = printable(
            e["code"]
                .as_str()
                .or_else(|| e["rule"].as_str())
                .unwrap_or("-"),
        );
        let trace = e["trace_id"]
            .as_str()
            .map(|t| format!("  trace={}", printable(t)))
            .unwrap_or_default();
        outln!(
            "{}  {principal}  {}  {}  {}  {why}  run={}  {}  {}{trace}",
            e["ts_ms"].as_i64().unwrap_or_default(),
            s(e, "op"),
            s(e, "outcome"),
            e["status"].as_u64().unwrap_or_default(),
            s(e, "run_id"),
            s(e, "purpose"),
            s(e, "request_id"),
        );
    }
    if let Some(next) = v["next"].as_str() {
        outln!("more: --after {}", printable(next));
    }
}

/// `s` as printed in a column: as is when it is plain; quoted, with escapes, when it holds
/// whitespace (which would fake columns), a quote or backslash, or anything Rust would escape
/// for debugging (control characters, bidi overrides, zero-width and other invisible ones).
pub(crate) fn printable(s: &str) -> String {
    let plain = s
        .chars()
        .all(|c| !c.is_whitespace() && c != '"' && c != '\\' && c.escape_debug().count() == 1);
    if plain {
        s.to_owned()
    } else {
        format!("{s:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_in_stored_values_are_escaped() {
        assert_eq!(printable("files.read"), "files.read");
        assert_eq!(
            printable("x\n1  alice  commands.run"),
            "\"x\\n1  alice  commands.run\""
        );
        assert_eq!(printable("\u{1b}[2Kx"), "\"\\u{1b}[2Kx\"");
        assert_eq!(printable("evil\u{202e}nur.sh"), "\"evil\\u{202e}nur.sh\"");
        assert_eq!(printable("a b"), "\"a b\"");
    }
}
