//! `CliError`: a command that fails returns it, and `run()` prints it once on stderr and ends
//! with its exit code (ripgrep's `main` does the same), so no command prints and exits itself.

use crate::Exit;

/// A command's failure: the text `run()` prints on stderr, and the exit code it ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The exit code (2, `Exit::Error`, unless the constructor says otherwise).
    exit: Exit,
    // INVARIANT (one line or rendered block): ends with a newline, so `print` writes it as is;
    // every constructor keeps it.
    /// What is printed on stderr, exactly.
    text: String,
}

impl CliError {
    /// `error: <message>`, exit 2: bad usage, a config or server that cannot be used.
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Self::line(Exit::Error, format!("error: {message}"))
    }

    /// `error[<code>]: <message>`, exit 2.
    pub fn coded(code: &str, message: impl std::fmt::Display) -> Self {
        Self::line(Exit::Error, format!("error[{code}]: {message}"))
    }

    /// A config that does not load: its rendered diagnostics, exit 2.
    pub fn config(e: &corral_config::LoadError) -> Self {
        let mut text = e.render();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        Self {
            exit: Exit::Error,
            text,
        }
    }

    /// One line printed as written (no `error:` prefix added), with this exit code.
    pub fn line(exit: Exit, line: impl Into<String>) -> Self {
        let mut text = line.into();
        text.push('\n');
        Self { exit, text }
    }

    /// The same text with another exit code.
    #[must_use]
    pub fn with_exit(self, exit: Exit) -> Self {
        Self { exit, ..self }
    }

    /// The exit code the binary ends with.
    pub fn exit(&self) -> Exit {
        self.exit
    }

    /// Prints the text on stderr (a closed stderr is ignored: the exit code still tells).
    pub fn print(&self) {
        use std::io::Write as _;
        let _ = std::io::stderr().lock().write_all(self.text.as_bytes());
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text.trim_end_matches('\n'))
    }
}

/// What a command returns: the exit code it ends with, or the failure `run()` prints.
pub type CliResult = Result<Exit, CliError>;
