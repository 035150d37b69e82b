//! `corral check-config`: load errors first, then the lint; `--strict` fails on warnings. Exit
//! 2 for a config error (load errors, or a non-`lint.*` error), 1 for lint findings.

use std::path::PathBuf;

use serde::Serialize;

use corral_config::{Severity, lint};

use crate::context;
use crate::output::{DiagnosticOut, print_json};
use crate::{CliResult, Exit, Format};

#[derive(Serialize)]
struct Report {
    config: String,
    ok: bool,
    strict: bool,
    errors: usize,
    warnings: usize,
    notes: usize,
    diagnostics: Vec<DiagnosticOut>,
}

/// The note for a variable the config names that is unset where `check-config` runs.
fn unset_here(name: String) -> corral_config::Diagnostic {
    corral_config::Diagnostic::note(
        corral_policy::codes::CONFIG_TOKEN_ENV_UNSET,
        format!(
            "the variable `{name}` is unset here; check-config reads no secret, and `corral serve` needs it set"
        ),
        "",
        None,
    )
}

/// Runs `corral check-config`: the report, and the exit code its findings give.
pub fn run(config: Option<PathBuf>, strict: bool, format: Format) -> CliResult {
    let path = context::config_path(config);
    // Offline: a secret that is unset here is a note (`corral serve` needs it), not an error.
    let env = corral_config::OfflineEnv::default();
    let (diags, rendered, loaded) = match corral_config::load_file_with_env(&path, &env) {
        Ok(l) => {
            let mut f = lint::lint(&l);
            f.extend(env.stood_in().into_iter().map(unset_here));
            let r = l.render(&f);
            (f, r, true)
        }
        Err(e) => (e.diagnostics.clone(), e.render(), false),
    };
    let count = |s: Severity| diags.iter().filter(|d| d.severity == s).count();
    let fails = !loaded || lint::fails(&diags, strict);
    match format {
        Format::Json => print_json(&Report {
            config: path.display().to_string(),
            ok: !fails,
            strict,
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            notes: count(Severity::Note),
            diagnostics: diags.iter().map(DiagnosticOut::from).collect(),
        }),
        Format::Human => {
            if !rendered.is_empty() {
                out!("{rendered}");
            }
            let summary = format!(
                "{}: {} error(s), {} warning(s), {} note(s){}",
                path.display(),
                count(Severity::Error),
                count(Severity::Warning),
                count(Severity::Note),
                if strict {
                    " (strict: warnings fail)"
                } else {
                    ""
                }
            );
            if fails {
                outln!("{summary}: check failed");
            } else {
                outln!("{summary}: ok");
            }
        }
    }
    // A config error (the file does not load, or a load-level error such as
    // `policy.scope_required`) is 2, lint findings 1: the README's exit codes.
    Ok(match (loaded && !lint::has_config_error(&diags), fails) {
        (false, _) => Exit::Error,
        (true, true) => Exit::Findings,
        (true, false) => Exit::Ok,
    })
}
