//! `corral sandbox generate`: spec 003's synthetic inputs, made locally (`corral_lab::synthetic`);
//! nothing is stored and no server is asked.

use std::path::PathBuf;

use corral_lab::synthetic;

use super::printable_text;
use crate::{CliError, CliResult, Exit, Format};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How many samples (1 to 100; default 10).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// The subject kind, `{{subject_kind}}` (default `agent`; at most 200 bytes).
    #[arg(long, value_name = "K")]
    subject_kind: Option<String>,
    /// The template file (`-`: stdin; at most 8192 bytes, newlines kept). Default:
    /// `{{subject_kind}}-sample-{{index}}`.
    #[arg(long, value_name = "FILE")]
    seed_file: Option<PathBuf>,
    /// Output format (`json`: `{"samples": [{key, input}]}`).
    #[arg(long, short = 'o', value_enum, default_value_t)]
    format: Format,
}

pub(crate) fn run(a: Args) -> CliResult {
    let seed = match &a.seed_file {
        None => None,
        Some(path) => {
            // One byte past the limit is enough to refuse a template by its size.
            let bytes = super::read_input(path, synthetic::MAX_TEMPLATE_BYTES as u64, "seed file")?;
            Some(synthetic::template_from_bytes(&bytes).map_err(refused)?)
        }
    };
    let batch = synthetic::generate(&synthetic::Request {
        subject_kind: a.subject_kind,
        count: a.count,
        seed,
    })
    .map_err(refused)?;
    match a.format {
        Format::Json => crate::output::print_json(&batch),
        Format::Human => {
            for s in &batch.samples {
                outln!("{}  {}", s.key, printable_text(&s.input));
            }
        }
    }
    Ok(Exit::Ok)
}

/// A request over a limit: refused whole, with its code (exit 2, a usage error).
fn refused(e: synthetic::SyntheticError) -> CliError {
    CliError::coded(e.code(), &e)
}
