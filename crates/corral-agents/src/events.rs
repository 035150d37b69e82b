//! A session's events, as corral streams and audits them, and the hostile-input guards every
//! byte an agent prints goes through: lines cut at [`MAX_LINE`], text cut at [`MAX_TEXT`] with
//! control characters (terminal escapes among them) replaced, at most [`MAX_EVENTS`] a turn.

use serde::{Deserialize, Serialize};

/// The longest line of an agent's output read; the rest of a longer line is dropped (and
/// reported once as an `error` event).
pub const MAX_LINE: usize = 1024 * 1024;
/// The most characters of any text kept in an event (a message, a command, a path).
pub const MAX_TEXT: usize = 16 * 1024;
/// The most argv entries kept of a command.
pub const MAX_ARGV: usize = 256;
/// The most events one turn streams; past it the turn is ended (its CLI killed).
pub const MAX_EVENTS: usize = 10_000;

/// Tokens one turn used, as the CLI reported them (corral's own count is the proxy's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Of which served from a cache.
    pub cached_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// What a file change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A new file.
    Add,
    /// A changed file.
    Update,
    /// A removed file.
    Delete,
}

/// One step of a session, as corral streams it (SSE) and audits it (as an op, without values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionEvent {
    /// The agent started a turn of its model (codex `turn.started`, claude `assistant`).
    ModelTurn {
        /// The session's turn (1 for the first task, 2 for the first `send_event`, ...).
        turn: u32,
    },
    /// A command the agent ran (started: `exit` is `None` and `done` false).
    Command {
        /// Its argv, as the agent reported it.
        argv: Vec<String>,
        /// Its exit status, once known.
        exit: Option<i32>,
        /// Whether it finished.
        done: bool,
    },
    /// A file the agent changed (or tried to: `applied` false when it failed).
    FileChange {
        /// The path, as the agent reported it.
        path: String,
        /// What it did.
        kind: ChangeKind,
        /// Whether the change was made.
        applied: bool,
    },
    /// A connection the agent asked corral's egress proxy for (a scope whose `network` is an
    /// allow-list), allowed or refused: the host and port it asked for, never a byte of payload.
    Network {
        /// The host, as the agent asked for it (lowercased, cleaned, cut).
        host: String,
        /// The port.
        port: u16,
        /// Whether the proxy made the connection.
        allowed: bool,
        /// Why it was refused (or failed once allowed).
        reason: Option<String>,
    },
    /// Changes of the turn that wait for a person (the scope's `confirm_writes_outside`):
    /// none of them reached the workdir; `agents.<a>.sessions.apply_writes` with this `hold`
    /// applies them once a person approves that call.
    WritesHeld {
        /// The hold's id.
        hold: String,
        /// The changes (at most 100 listed): `path`, and `kind` `write`, `delete` or
        /// `replace`.
        changes: Vec<corral_exec::HeldChange>,
        /// Held changes beyond the listed ones.
        more: u64,
    },
    /// A hold a person approved was applied to the workdir.
    WritesApplied {
        /// The hold's id.
        hold: String,
        /// Entries created, changed or deleted.
        applied: u64,
        /// Changes refused on the way (a protected path, a git repository, a symlink).
        refused: u64,
    },
    /// Changes of the turn that never reached the host: refused when the sandbox applied them
    /// (a `protected:` path, a git repository, a set-id bit, the write quota, what the host's
    /// permissions refuse). The agent may have reported them done: this says they are not.
    ChangesRefused {
        /// The changes (at most 100 listed): the host `path`, the refusal's stable `code`
        /// and its `reason`.
        changes: Vec<corral_exec::RefusedChange>,
        /// Refused changes beyond the listed ones.
        more: u64,
    },
    /// Text the agent wrote for the user.
    Message {
        /// The text.
        text: String,
    },
    /// Something went wrong: in the agent (its own error events) or in its output.
    Error {
        /// A stable code (`agents.output`, `agents.turn_failed`, ... or `agents.agent_error`
        /// for the agent's own).
        code: String,
        /// What happened.
        message: String,
    },
    /// The turn ended.
    Done {
        /// The session's turn that ended.
        turn: u32,
        /// Whether it ended well (the CLI reported success and exited 0).
        ok: bool,
        /// The tokens it used, as the CLI reported them.
        usage: Usage,
    },
}

impl SessionEvent {
    /// The `network` event of what the egress proxy did with one connection.
    pub fn network(r: &corral_exec::EgressRecord) -> Self {
        SessionEvent::Network {
            host: one_line(&r.host, 255),
            port: r.port,
            allowed: r.allowed,
            reason: r.reason.as_deref().map(|w| one_line(w, MAX_REASON)),
        }
    }

    /// An `error` event with `code`, its message made safe.
    pub fn error(code: &str, message: impl AsRef<str>) -> Self {
        SessionEvent::Error {
            code: code.to_owned(),
            message: clean(message.as_ref()),
        }
    }

    /// The op this event lands in the audit as, for a session of `adapter` (its values never
    /// go there: the audit keeps shapes): `agents.<a>.exec` for a finished command,
    /// `agents.<a>.write` for a file it changed (and, refused, for changes that never reached
    /// the host), `agents.<a>.model` for a model turn,
    /// `agents.<a>.connect` for a connection through the egress proxy (the step
    /// kinds of `corral_policy::scope::STEP_KINDS`); `None` for the rest (a started
    /// command, a message, an error, `done`: the session's own record keeps those).
    pub fn audit_op(&self, adapter: &str) -> Option<String> {
        let what = match self {
            SessionEvent::Command { done: true, .. } => "exec",
            SessionEvent::FileChange { .. } | SessionEvent::ChangesRefused { .. } => "write",
            SessionEvent::ModelTurn { .. } => "model",
            SessionEvent::Network { .. } => "connect",
            _ => return None,
        };
        Some(corral_policy::scope::step_op_id(adapter, what))
    }

    /// The event's type, as serialized (`model_turn`, `command`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEvent::ModelTurn { .. } => "model_turn",
            SessionEvent::Command { .. } => "command",
            SessionEvent::FileChange { .. } => "file_change",
            SessionEvent::Network { .. } => "network",
            SessionEvent::WritesHeld { .. } => "writes_held",
            SessionEvent::WritesApplied { .. } => "writes_applied",
            SessionEvent::ChangesRefused { .. } => "changes_refused",
            SessionEvent::Message { .. } => "message",
            SessionEvent::Error { .. } => "error",
            SessionEvent::Done { .. } => "done",
        }
    }
}

/// The most characters of a connection's refusal reason kept.
const MAX_REASON: usize = 300;

/// `text` as [`clean`] makes it, on one line (newlines and tabs are spaces too), cut at `max`
/// characters (ending with `…`).
fn one_line(text: &str, max: usize) -> String {
    let mut out: String = clean(text)
        .chars()
        .map(|c| if c == '\n' || c == '\t' { ' ' } else { c })
        .take(max + 1)
        .collect();
    if out.chars().count() > max {
        out = out.chars().take(max).collect();
        out.push('…');
    }
    out
}

/// `text` made safe to show and store: at most [`MAX_TEXT`] characters (a cut one ends with
/// `…`), every control character but newline and tab (ESC, so every terminal escape; C1
/// controls; DEL) replaced by `?`, as are bidirectional overrides.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_TEXT));
    for (n, c) in text.chars().enumerate() {
        if n == MAX_TEXT {
            out.push('…');
            break;
        }
        let bad = (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        out.push(if bad { '?' } else { c });
    }
    out
}

/// Splits an agent's output into lines, never holding more than [`MAX_LINE`] bytes of one: a
/// longer line is reported as [`Line::TooLong`] and the rest of it dropped.
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
    /// Dropping the rest of a line over the limit.
    skipping: bool,
}

/// One line out of a [`LineSplitter`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line (without its newline).
    Text(Vec<u8>),
    /// A line over [`MAX_LINE`], dropped.
    TooLong,
}

impl LineSplitter {
    /// Feeds `bytes`, returning the lines they completed.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            let (chunk, ended) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], Some(i + 1)),
                None => (bytes, None),
            };
            if !self.skipping {
                if self.buf.len() + chunk.len() > MAX_LINE {
                    self.buf = Vec::new();
                    self.skipping = true;
                    lines.push(Line::TooLong);
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            match ended {
                Some(i) => {
                    if !self.skipping {
                        lines.push(Line::Text(std::mem::take(&mut self.buf)));
                    }
                    self.skipping = false;
                    bytes = &bytes[i..];
                }
                None => bytes = &[],
            }
        }
        lines
    }

    /// The last line, when the output did not end with a newline.
    pub fn finish(&mut self) -> Option<Line> {
        if self.skipping || self.buf.is_empty() {
            return None;
        }
        Some(Line::Text(std::mem::take(&mut self.buf)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_line_split_across_reads_comes_out_whole() {
        let mut s = LineSplitter::default();
        assert!(s.feed(b"{\"a\"").is_empty());
        assert_eq!(
            s.feed(b":1}\nnext"),
            vec![Line::Text(b"{\"a\":1}".to_vec())]
        );
        assert_eq!(s.finish(), Some(Line::Text(b"next".to_vec())));
    }

    #[test]
    fn a_line_over_the_limit_is_reported_once_and_dropped() {
        let mut s = LineSplitter::default();
        let big = vec![b'x'; MAX_LINE / 2 + 1];
        assert!(s.feed(&big).is_empty());
        assert_eq!(s.feed(&big), vec![Line::TooLong]);
        assert!(s.feed(&big).is_empty());
        assert_eq!(s.feed(b"x\nok\n"), vec![Line::Text(b"ok".to_vec())]);
    }

    #[test]
    fn a_finished_command_is_audited_as_the_adapters_exec_op() {
        let done = SessionEvent::Command {
            argv: vec!["ls".into()],
            exit: Some(0),
            done: true,
        };
        assert_eq!(done.audit_op("codex").as_deref(), Some("agents.codex.exec"));
        let started = SessionEvent::Command {
            argv: vec!["ls".into()],
            exit: None,
            done: false,
        };
        assert_eq!(started.audit_op("codex"), None);
    }

    #[test]
    fn clean_text_keeps_no_terminal_escape_and_is_bounded() {
        assert_eq!(clean("a\u{1b}[31mb\u{9b}c\u{202e}\n"), "a?[31mb?c?\n");
        let long = "y".repeat(MAX_TEXT + 10);
        assert_eq!(clean(&long).chars().count(), MAX_TEXT + 1);
    }

    #[test]
    fn a_connection_event_is_one_line_of_bounded_text() {
        let record = corral_exec::EgressRecord {
            host: "evil\n.example".into(),
            port: 443,
            addr: None,
            allowed: false,
            reason: Some(format!(
                "`x\nnetwork github.com:443 allowed{}` is not a valid host",
                "z".repeat(20_000)
            )),
            bytes_up: 0,
            bytes_down: 0,
        };
        let SessionEvent::Network { host, reason, .. } = SessionEvent::network(&record) else {
            unreachable!()
        };
        assert_eq!(host, "evil .example");
        let reason = reason.unwrap_or_default();
        assert!(!reason.contains('\n'), "{reason}");
        assert_eq!(reason.chars().count(), MAX_REASON + 1, "cut, with its mark");
        assert!(reason.ends_with('…'));
    }
}
