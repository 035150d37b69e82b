//! `corral sandbox recordings list | get | input | export | delete`: the recorded call timelines
//! of runs (issue 15). A recording holds call values: reading one needs the `admin` role or the
//! run's own principal; deleting one needs the `admin` role.

use clap::Subcommand;
use corral_client::sandbox::{PageRequest, RecordingDetail};

use super::{Conn, Lab, printable};
use crate::{CliResult, Exit, Format};

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List the recordings you may read, newest first (an admin: every one of the tenant).
    List {
        /// Rows per page.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Start after this cursor (the `next` of the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show a recording and its calls in order: op, arguments, response or error code.
    Get {
        /// The run id.
        run: String,
        /// The principal whose recording of the run to show (its identity, or its id), when
        /// several principals recorded under the run id (an admin's read).
        #[arg(long, value_name = "IDENTITY")]
        owner: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Keep a live session's task input in its recording, once (the run's own principal; an
    /// admin for a recording that exists): what `corral sandbox replay --variant` re-runs.
    Input {
        /// The run id.
        run: String,
        /// The steps, `[{"input": ..., "expected": ...}]` (JSON file, `-` for stdin).
        #[arg(long, value_name = "FILE")]
        steps_file: std::path::PathBuf,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print a recording as JSON lines: a `{"kind":"recording",...}` line, then one
    /// `{"kind":"event",...}` line per call, in order.
    Export {
        /// The run id.
        run: String,
        /// The principal whose recording of the run to export (its identity, or its id), when
        /// several principals recorded under the run id (an admin's read).
        #[arg(long, value_name = "IDENTITY")]
        owner: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete a recording and its events (admin): frees its principal's share
    /// (`recordings.max_per_principal`) and the tenant's before retention does.
    Delete {
        /// The run id.
        run: String,
        /// The principal whose recording of the run to delete (its identity, or its id), when
        /// several principals recorded under the run id.
        #[arg(long, value_name = "IDENTITY")]
        owner: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
}

pub(crate) fn run(c: Command) -> CliResult {
    match c {
        Command::List { limit, after, conn } => {
            let page = Lab::open(&conn)?.list_recordings(&PageRequest { limit, after })?;
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no recordings");
                    }
                    for r in &page.items {
                        outln!(
                            "{}  principal={}  {} event(s){}",
                            printable(&r.run_id),
                            printable(&r.principal),
                            r.events,
                            flags(r.capped, r.gapped)
                        );
                    }
                    if let Some(next) = &page.next {
                        outln!("more: --after {}", printable(next));
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Command::Get { run, owner, conn } => {
            let detail = Lab::open(&conn)?.recording(&run, owner.as_deref())?;
            match conn.format {
                Format::Json => crate::output::print_json(&detail),
                Format::Human => print_recording(&detail),
            }
            Ok(Exit::Ok)
        }
        Command::Input {
            run,
            steps_file,
            conn,
        } => {
            let steps = super::read_json(&steps_file, "the steps")?;
            let r = Lab::open(&conn)?.set_recording_input(&run, &steps)?;
            match conn.format {
                Format::Json => crate::output::print_json(&r),
                Format::Human => outln!(
                    "recording {}: task input kept ({} event(s) so far)",
                    printable(&r.run_id),
                    r.events
                ),
            }
            Ok(Exit::Ok)
        }
        Command::Delete { run, owner, conn } => {
            let r = Lab::open(&conn)?.delete_recording(&run, owner.as_deref())?;
            match conn.format {
                Format::Json => crate::output::print_json(&r),
                Format::Human => outln!(
                    "recording {} by {} deleted ({} event(s))",
                    printable(&r.run_id),
                    printable(&r.identity),
                    r.events
                ),
            }
            Ok(Exit::Ok)
        }
        Command::Export { run, owner, conn } => {
            let lines = Lab::open(&conn)?.export_recording(&run, owner.as_deref())?;
            // JSON lines whatever `-o` says: each line is JSON, and every character a terminal
            // acts on is written `\uXXXX` (a recorded value is whatever a caller sent or got).
            out!("{}", crate::output::terminal_safe(lines));
            Ok(Exit::Ok)
        }
    }
}

fn flags(capped: bool, gapped: bool) -> String {
    let mut f = String::new();
    if capped {
        f.push_str("  CAPPED (later calls not recorded)");
    }
    if gapped {
        f.push_str("  GAPPED (a call could not be recorded)");
    }
    f
}

fn print_recording(d: &RecordingDetail) {
    let r = &d.recording;
    outln!(
        "recording of run {} (principal {}, purpose {}): {} event(s), {} bytes{}",
        printable(&r.run_id),
        printable(&r.principal),
        printable(&r.purpose),
        r.events,
        r.bytes,
        flags(r.capped, r.gapped)
    );
    for e in &d.events {
        let answer = match (&e.error_code, &e.response) {
            (Some(code), _) => format!("error {}", printable(code)),
            (None, Some(v)) => format!("response {}", printable(&v.to_string())),
            (None, None) => "no response".to_owned(),
        };
        outln!(
            "{:>4}  {}  {}  {answer}",
            e.seq,
            printable(&e.op),
            printable(&e.args.to_string())
        );
    }
}
