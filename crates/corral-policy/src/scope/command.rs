//! `CommandScope`: which argv a caller may run, where, and with what environment.

use std::time::Duration;

use globset::{GlobBuilder, GlobMatcher};

use crate::codes;
use crate::error::PolicyError;
use crate::scope::path::{JailedPath, NormPath};

/// One token of an argv pattern.
#[derive(Debug, Clone)]
pub enum ArgPattern {
    /// Exactly this argument.
    Literal(String),
    /// One argument matching a glob (`*` never crosses `/`; an argument with a `..` component
    /// never matches).
    Glob(String, GlobMatcher),
    /// `...`: any number of arguments (zero or more).
    Rest,
    /// `{path}`: one argument that resolves beneath the scope's cwd.
    Path,
    /// `{int}`: one optionally signed decimal integer.
    Int,
    /// `{word}`: one `[A-Za-z0-9_][A-Za-z0-9_.-]*` (never an option).
    Word,
}

impl ArgPattern {
    fn parse(tok: &str) -> Result<Self, PolicyError> {
        Ok(match tok {
            "..." => ArgPattern::Rest,
            "{path}" => ArgPattern::Path,
            "{int}" => ArgPattern::Int,
            "{word}" => ArgPattern::Word,
            t if t.contains(['*', '?', '[']) => {
                let m = GlobBuilder::new(t)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| PolicyError::InvalidScope {
                        what: format!("argument pattern `{t}` is not a valid glob: {}", e.kind()),
                        fix: "write a glob such as `tests/*.py`".to_owned(),
                    })?
                    .compile_matcher();
                ArgPattern::Glob(t.to_owned(), m)
            }
            t if t.starts_with('{') && t.ends_with('}') => {
                return Err(PolicyError::InvalidScope {
                    what: format!("unknown placeholder `{t}` in a command pattern"),
                    fix: "the placeholders are `{path}`, `{int}` and `{word}`".to_owned(),
                });
            }
            t => ArgPattern::Literal(t.to_owned()),
        })
    }

    fn matches_one(&self, arg: &str, jail: Option<&NormPath<'_>>) -> bool {
        match self {
            ArgPattern::Literal(l) => l == arg,
            ArgPattern::Glob(_, m) => !arg.split('/').any(|c| c == "..") && m.is_match(arg),
            ArgPattern::Rest => true,
            ArgPattern::Path => jail.is_some_and(|j| resolve_beneath(j, arg).is_some()),
            ArgPattern::Int => {
                let digits = arg.strip_prefix('-').unwrap_or(arg);
                !digits.is_empty()
                    && digits.len() <= 19
                    && digits.bytes().all(|b| b.is_ascii_digit())
            }
            ArgPattern::Word => is_word(arg),
        }
    }

    /// The token as written.
    pub fn as_written(&self) -> &str {
        match self {
            ArgPattern::Literal(s) | ArgPattern::Glob(s, _) => s,
            ArgPattern::Rest => "...",
            ArgPattern::Path => "{path}",
            ArgPattern::Int => "{int}",
            ArgPattern::Word => "{word}",
        }
    }
}

/// Whether `s` is one word: `[A-Za-z0-9_][A-Za-z0-9_.-]*`, at most 256 bytes.
pub fn is_word(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 256
        && b.next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Resolves `arg` against `jail` (relative args join it) and returns the normalized result if it
/// stays beneath the jail.
fn resolve_beneath<'a>(jail: &NormPath<'a>, arg: &'a str) -> Option<NormPath<'a>> {
    if arg.is_empty() || arg.contains('\0') {
        return None;
    }
    let resolved = if arg.starts_with('/') {
        NormPath::new(arg)?
    } else {
        let mut parts = jail.parts.clone();
        for c in arg.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    if parts.len() <= jail.parts.len() {
                        return None;
                    }
                    parts.pop();
                }
                c => parts.push(c),
            }
        }
        NormPath::from_parts_pub(parts)
    };
    resolved.starts_with(jail).then_some(resolved)
}

/// An argv pattern: a program and argument tokens.
#[derive(Debug, Clone)]
pub struct ArgvPattern {
    written: String,
    tokens: Vec<ArgPattern>,
}

impl ArgvPattern {
    /// Parses a pattern written as one line (split like a POSIX shell would, without running
    /// one). The program must be a literal.
    pub fn parse(line: &str) -> Result<Self, PolicyError> {
        let words = shlex::split(line).ok_or_else(|| PolicyError::InvalidScope {
            what: format!("command pattern `{line}` has unbalanced quotes"),
            fix: "close the quote, or write the pattern as a list of arguments".to_owned(),
        })?;
        Self::from_tokens(line, &words)
    }

    /// Builds a pattern from argument tokens.
    pub fn from_tokens(written: &str, words: &[String]) -> Result<Self, PolicyError> {
        let tokens = words
            .iter()
            .map(|w| ArgPattern::parse(w))
            .collect::<Result<Vec<_>, _>>()?;
        match tokens.first() {
            Some(ArgPattern::Literal(_)) => {}
            Some(_) | None => {
                return Err(PolicyError::InvalidScope {
                    what: format!("command pattern `{written}` does not start with a program name"),
                    fix: "start the pattern with the literal program, e.g. `pytest ...`".to_owned(),
                });
            }
        }
        Ok(Self {
            written: written.to_owned(),
            tokens,
        })
    }

    /// The pattern as written.
    pub fn as_written(&self) -> &str {
        &self.written
    }

    /// The tokens.
    pub fn tokens(&self) -> &[ArgPattern] {
        &self.tokens
    }

    /// The program (first token).
    pub fn program(&self) -> &str {
        self.tokens.first().map_or("", ArgPattern::as_written)
    }

    /// Whether `argv` matches. `{path}` arguments must resolve beneath `jail`.
    pub fn matches(&self, argv: &[String], jail: Option<&NormPath<'_>>) -> bool {
        // reach[j]: the first i tokens can consume exactly the first j arguments.
        let n = argv.len();
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        for tok in &self.tokens {
            let mut next = vec![false; n + 1];
            match tok {
                ArgPattern::Rest => {
                    let mut any = false;
                    for j in 0..=n {
                        any |= reach[j];
                        next[j] = any;
                    }
                }
                one => {
                    for j in 0..n {
                        if reach[j] && one.matches_one(&argv[j], jail) {
                            next[j + 1] = true;
                        }
                    }
                }
            }
            reach = next;
        }
        reach[n]
    }
}

/// How a command scope is written: the input of `CommandScope::compile`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandScopeSpec {
    /// Allowed argv patterns.
    pub allow: Vec<String>,
    /// Denied argv patterns; they beat `allow`.
    pub deny: Vec<String>,
    /// Whether a call may ask for `sh -c`. A lint error when true.
    pub shell: bool,
    /// The working directory; a call's `cwd` must lie beneath it. `{path}` jails here too.
    pub cwd: Option<String>,
    /// Environment variables passed through from the server.
    pub env_pass: Vec<String>,
    /// Environment variables set to fixed values.
    pub env_set: Vec<(String, String)>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Output kept per stream.
    pub max_output_bytes: Option<u64>,
    /// The network the command gets; `None`: the backend's (`isolation.network`).
    pub network: Option<super::NetworkSpec>,
}

/// A compiled command scope.
#[derive(Debug, Clone)]
pub struct CommandScope {
    spec: CommandScopeSpec,
    allow: Vec<ArgvPattern>,
    deny: Vec<ArgvPattern>,
    cwd: Option<Vec<String>>,
}

/// Why an argv was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandRefusal {
    /// The call asked for a shell.
    Shell,
    /// The cwd is outside the scope.
    Cwd,
    /// A deny pattern matched.
    Denied,
    /// No allow pattern matched.
    NotAllowed,
}

impl CommandRefusal {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            CommandRefusal::Shell => codes::POLICY_SHELL_NOT_ALLOWED,
            CommandRefusal::Cwd => codes::POLICY_CWD_OUTSIDE_SCOPE,
            CommandRefusal::Denied => codes::POLICY_COMMAND_DENIED,
            CommandRefusal::NotAllowed => codes::POLICY_COMMAND_NOT_ALLOWED,
        }
    }
}

/// A command the scope accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandGrant {
    /// The argv to run, as given.
    pub argv: Vec<String>,
    /// The working directory, jailed beneath the scope's cwd.
    pub cwd: Option<JailedPath>,
    /// Run through `sh -c` (only when the scope allows a shell).
    pub shell: bool,
    /// Variables passed through.
    pub env_pass: Vec<String>,
    /// Variables set.
    pub env_set: Vec<(String, String)>,
    /// The pattern that matched.
    pub pattern: String,
    /// The network the command gets; `None`: the backend's.
    pub network: Option<super::NetworkSpec>,
}

impl CommandScope {
    /// Validates and compiles a command scope.
    pub fn compile(spec: CommandScopeSpec) -> Result<Self, PolicyError> {
        let allow = spec
            .allow
            .iter()
            .map(|p| ArgvPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let deny = spec
            .deny
            .iter()
            .map(|p| ArgvPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = match &spec.cwd {
            None => None,
            Some(c) => {
                let n = NormPath::new(c)
                    .filter(|n| !n.parts.is_empty() && !c.contains(".."))
                    .ok_or_else(|| PolicyError::InvalidScope {
                        what: format!("cwd `{c}` is not an absolute directory other than `/`"),
                        fix: "write an absolute directory such as `/workspace`".to_owned(),
                    })?;
                Some(n.parts.iter().map(|s| (*s).to_owned()).collect())
            }
        };
        Ok(Self {
            spec,
            allow,
            deny,
            cwd,
        })
    }

    /// The scope as written.
    pub fn spec(&self) -> &CommandScopeSpec {
        &self.spec
    }

    /// The compiled allow patterns.
    pub fn allow_patterns(&self) -> &[ArgvPattern] {
        &self.allow
    }

    fn cwd_path(&self) -> Option<NormPath<'_>> {
        self.cwd
            .as_ref()
            .map(|parts| NormPath::from_parts_pub(parts.iter().map(String::as_str).collect()))
    }

    /// For a deny rule: whether any of the scope's patterns (allow or deny) matches.
    pub fn covers(&self, argv: &[String]) -> bool {
        let jail = NormPath::new("/");
        self.allow
            .iter()
            .chain(&self.deny)
            .any(|p| p.matches(argv, jail.as_ref()))
    }

    /// Checks an argv, an optional cwd and a shell request.
    pub fn check(
        &self,
        argv: &[String],
        cwd: Option<&str>,
        shell: bool,
    ) -> Result<CommandGrant, CommandRefusal> {
        if shell && !self.spec.shell {
            return Err(CommandRefusal::Shell);
        }
        let jail = self.cwd_path();
        let effective_cwd = match (cwd, &jail) {
            (None, None) => None,
            (None, Some(j)) => Some(j.clone()),
            (Some(c), Some(j)) => Some(resolve_beneath(j, c).ok_or(CommandRefusal::Cwd)?),
            (Some(_), None) => return Err(CommandRefusal::Cwd),
        };
        if self.deny.iter().any(|p| p.matches(argv, jail.as_ref())) {
            return Err(CommandRefusal::Denied);
        }
        let pattern = self
            .allow
            .iter()
            .find(|p| p.matches(argv, jail.as_ref()))
            .ok_or(CommandRefusal::NotAllowed)?;
        let jail_len = jail.as_ref().map_or(0, |j| j.parts.len());
        Ok(CommandGrant {
            argv: argv.to_vec(),
            cwd: effective_cwd.map(|c| c.jail(jail_len)),
            shell,
            env_pass: self.spec.env_pass.clone(),
            env_set: self.spec.env_set.clone(),
            pattern: pattern.as_written().to_owned(),
            network: self.spec.network.clone(),
        })
    }
}
