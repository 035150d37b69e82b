//! JSON output shapes for `--format json` (snake_case, one document per run).

use serde::Serialize;

use corral_config::{Diagnostic, Severity};

/// One diagnostic.
#[derive(Debug, Serialize)]
pub struct DiagnosticOut {
    pub code: &'static str,
    pub severity: &'static str,
    pub message: String,
    pub location: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub fix: String,
    pub doc: String,
    pub text: String,
}

impl From<&Diagnostic> for DiagnosticOut {
    fn from(d: &Diagnostic) -> Self {
        Self {
            code: d.code,
            severity: match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            },
            message: d.message.clone(),
            location: d.location.clone(),
            line: d.span.map(|s| s.line),
            column: d.span.map(|s| s.col),
            fix: d.fix.clone(),
            doc: d.doc(),
            text: d.to_string(),
        }
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("error: cannot encode the output as JSON: {e}"),
    }
}
