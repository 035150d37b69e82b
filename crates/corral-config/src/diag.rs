//! Diagnostics: every config error and lint finding, in one form.
//!
//! The form is `<what is wrong> (<where>); <how to fix>; see: <doc id>`, with a stable code from
//! `corral_policy::codes`, a severity and, when it comes from a file, a span.

use std::fmt;

use corral_policy::codes;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan};

use crate::yaml::Span;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Blocks loading (config errors) or fails `check-config`.
    Error,
    /// Fails `check-config --strict`.
    Warning,
    /// Information only; never fails.
    Note,
}

impl Severity {
    /// `error`, `warning` or `note`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// One error or finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code from the catalog.
    pub code: &'static str,
    /// Error, warning or note.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
    /// Where, as a key path (`rules[2].paths.roots[0]`).
    pub location: String,
    /// How to fix it.
    pub fix: String,
    /// Where in the file.
    pub span: Option<Span>,
}

impl Diagnostic {
    /// An error.
    pub fn error(
        code: &'static str,
        message: impl Into<String>,
        location: impl Into<String>,
        span: Option<Span>,
    ) -> Self {
        let fix = codes::lookup(code)
            .map(|c| c.fix.to_owned())
            .unwrap_or_default();
        Self {
            code,
            severity: Severity::Error,
            message: message.into(),
            location: location.into(),
            fix,
            span,
        }
    }

    /// A warning.
    pub fn warning(
        code: &'static str,
        message: impl Into<String>,
        location: impl Into<String>,
        span: Option<Span>,
    ) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(code, message, location, span)
        }
    }

    /// A note.
    pub fn note(
        code: &'static str,
        message: impl Into<String>,
        location: impl Into<String>,
        span: Option<Span>,
    ) -> Self {
        Self {
            severity: Severity::Note,
            ..Self::error(code, message, location, span)
        }
    }

    /// Replaces the fix.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = fix.into();
        self
    }

    /// The documentation id.
    pub fn doc(&self) -> String {
        codes::doc_id(self.code)
    }

    /// The `where` part: the key path and, when known, the line and column.
    pub fn place(&self) -> String {
        match (self.location.is_empty(), self.span) {
            (false, Some(s)) => format!("`{}` at {s}", self.location),
            (false, None) => format!("`{}`", self.location),
            (true, Some(s)) => s.to_string(),
            (true, None) => "the config".to_owned(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}); {}; see: {}",
            self.message,
            self.place(),
            self.fix,
            self.doc()
        )
    }
}

/// Renders diagnostics for people: the one-line form, then the source lines around the span.
/// No colour, so the output is stable for snapshots and logs.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str) -> String {
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor())
        .with_width(100)
        .with_wrap_lines(false)
        .with_context_lines(1);
    let mut out = String::new();
    for d in diags {
        let shown = Shown {
            d,
            src: NamedSource::new(file_name, source.to_owned()),
        };
        let mut one = String::new();
        if handler.render_report(&mut one, &shown).is_err() {
            one = format!("{}[{}]: {d}\n", d.severity.as_str(), d.code);
        }
        out.push_str(&one);
    }
    out
}

struct Shown<'a> {
    d: &'a Diagnostic,
    src: NamedSource<String>,
}

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.d, f)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}[{}]: {}",
            self.d.severity.as_str(),
            self.d.code,
            self.d
        )
    }
}

impl std::error::Error for Shown<'_> {}

impl miette::Diagnostic for Shown<'_> {
    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.d.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
            Severity::Note => miette::Severity::Advice,
        })
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.d.span.map(|_| &self.src as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.d.span?;
        let label = LabeledSpan::new_with_span(
            Some(self.d.location.clone()).filter(|l| !l.is_empty()),
            SourceSpan::new(span.offset.into(), span.len),
        );
        Some(Box::new(std::iter::once(label)))
    }
}
