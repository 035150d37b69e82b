//! JSON output shapes for `--format json` (snake_case, one document per run).

use std::io::Write as _;

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
        Ok(s) => outln!("{}", terminal_safe(s)),
        Err(e) => eprintln!("error: cannot encode the output as JSON: {e}"),
    }
}

/// Whether a character that serde_json leaves as is could drive a terminal or spoof the text
/// around it: a C1 control (U+009B is CSI), a bidi control, a zero-width or other invisible
/// format character, a line or paragraph separator. (C0 controls it escapes already.)
fn risky(c: char) -> bool {
    !c.is_ascii()
        && (c.is_control()
            || matches!(c, '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'))
}

/// `json` (serde_json's) with each [`risky`] character written `\uXXXX`: outside ASCII, such a
/// character can only sit inside a string, where the escape means the same. A stored value is
/// whatever a caller or a sandboxed program wrote, and this is printed to a terminal too.
pub(crate) fn terminal_safe(json: String) -> String {
    if !json.chars().any(risky) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 32);
    for c in json.chars() {
        if risky(c) {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes to stdout and flushes. A closed stdout (a reader like `head` that went away) ends the
/// process at once with 141, as SIGPIPE would; another write error is reported on stderr and
/// ends it with 74 (`EX_IOERR`). Committed state is not at stake: every result is printed after
/// its call, audit event and decision were committed.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(74);
    }
}
