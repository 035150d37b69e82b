//! `corral sandbox metering`: the tenant's runs and calls per purpose (`GET
//! /v1/sandbox/metering`, admin), one line per purpose; tokens and spend `not known` while null.

use serde_json::Value;

use super::{Conn, Lab, printable};
use crate::{CliResult, Exit, Format};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    conn: Conn,
}

pub(crate) fn run(a: Args) -> CliResult {
    let m = Lab::open(&a.conn)?.metering()?;
    match a.conn.format {
        Format::Json => crate::output::print_json(&m),
        Format::Human => print(&m),
    }
    Ok(Exit::Ok)
}

fn known(v: &Value) -> String {
    match v {
        Value::Null => "not known".to_owned(),
        other => printable(&other.to_string()),
    }
}

fn print(m: &Value) {
    outln!(
        "metering of tenant {} (since the server started)",
        printable(m["tenant"].as_str().unwrap_or("?"))
    );
    for p in m["purposes"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        outln!(
            "  {:<10}  runs {}  calls {}  model tokens {}  spend {}",
            printable(p["purpose"].as_str().unwrap_or("?")),
            p["runs"].as_u64().unwrap_or_default(),
            p["calls"].as_u64().unwrap_or_default(),
            known(&p["tokens"]),
            known(&p["spend"])
        );
    }
}
