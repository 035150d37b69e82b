//! The adapters: for each agent CLI (`codex`, `claude_code`), how one turn of a session is
//! launched (argv, a cleared environment plus what it needs, files to write in its home) and
//! how its JSONL output becomes [`SessionEvent`]s.
//!
//! **Why the CLI's own sandbox is off.** Codex confines its commands with its own sandbox
//! (landlock + seccomp on Linux) and asks for approvals; claude_code asks for permissions. In
//! corral the whole CLI already runs in corral's sandbox (the workdir writable per the scope's
//! `permissions`, everything else read-only or absent, or with `full` the host's top-level
//! directories writable too through the same checked layer; the network only corral's LLM
//! proxy),
//! which is what the scope promises and what corral attests. A second, nested sandbox would
//! add nothing corral relies on, cannot be set up inside corral's (it needs the namespaces and
//! landlock domains corral's seccomp filter and user namespace already hold), and its
//! approvals would wait for a person no one asked. So codex runs with
//! `--dangerously-bypass-approvals-and-sandbox` ("intended solely for running in environments
//! that are externally sandboxed") and claude_code with `--permission-mode bypassPermissions`.
//!
//! The CLI never sees the upstream key: its API key is a token corral minted for the turn,
//! worth something only on the turn's link ([`crate::session`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::codes;
use crate::events::{ChangeKind, MAX_ARGV, SessionEvent, Usage, clean};

/// An agent CLI corral hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Adapter {
    /// OpenAI's codex (`@openai/codex`), speaking the Responses API.
    Codex,
    /// Anthropic's Claude Code (`@anthropic-ai/claude-code`), speaking the Messages API.
    ClaudeCode,
}

/// How much of the host a session may change: the scope's `permissions`, one type for the
/// policy and the sessions. `Full` may change the host beyond its workdir (the host's
/// top-level directories but the system ones, as far as corral's user may), still in corral's
/// sandbox: its writes go through the same copy-on-write layer and checks as the workdir's,
/// corral's own files and state stay out of reach, and the network, limits and seccomp are
/// those of every turn (see [`crate::session`]; attested `fs:unconfined`).
pub use corral_policy::scope::AgentPermissions as Permissions;

impl Adapter {
    /// Every adapter.
    pub const ALL: [Adapter; 2] = [Adapter::Codex, Adapter::ClaudeCode];

    /// Its name in config, ops and routes (`agents.codex.run`).
    pub fn name(self) -> &'static str {
        match self {
            Adapter::Codex => "codex",
            Adapter::ClaudeCode => "claude_code",
        }
    }

    /// The adapter named `name` (`claude-code` is accepted for `claude_code`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "codex" => Some(Adapter::Codex),
            "claude_code" | "claude-code" => Some(Adapter::ClaudeCode),
            _ => None,
        }
    }

    /// The variable holding the turn's token, the CLI's API key.
    pub fn token_env(self) -> &'static str {
        match self {
            Adapter::Codex => "CORRAL_AGENT_TOKEN",
            Adapter::ClaudeCode => "ANTHROPIC_API_KEY",
        }
    }

    /// How to launch one turn of a session.
    pub fn launch(self, t: &TurnSpec<'_>) -> Launch {
        let mut env = vec![
            // The `PATH` the scope's `commands` are looked up on.
            ("PATH".to_owned(), corral_exec::linux::SEARCH_PATH.join(":")),
            ("HOME".to_owned(), path_str(t.home)),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("TMPDIR".to_owned(), "/tmp".to_owned()),
            (self.token_env().to_owned(), t.token.to_owned()),
        ];
        let mut argv = t.program.to_vec();
        let mut files = Vec::new();
        match self {
            Adapter::Codex => {
                env.push(("CODEX_HOME".to_owned(), path_str(t.home)));
                files.push((t.home.join("config.toml"), codex_config(t)));
                argv.push("exec".to_owned());
                if t.resume.is_some() {
                    argv.push("resume".to_owned());
                }
                argv.extend(
                    [
                        "--json",
                        "--skip-git-repo-check",
                        "--dangerously-bypass-approvals-and-sandbox",
                        "-m",
                    ]
                    .map(str::to_owned),
                );
                argv.push(t.model.to_owned());
                argv.push("--".to_owned());
                if let Some(id) = t.resume {
                    argv.push(id.to_owned());
                }
                // The prompt comes on stdin: no argv length limit, no flag injection.
                argv.push("-".to_owned());
            }
            Adapter::ClaudeCode => {
                env.extend([
                    ("ANTHROPIC_BASE_URL".to_owned(), t.proxy_url.to_owned()),
                    ("CLAUDE_CONFIG_DIR".to_owned(), path_str(t.home)),
                    ("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()),
                    ("DISABLE_TELEMETRY".to_owned(), "1".to_owned()),
                    (
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
                        "1".to_owned(),
                    ),
                    // Tells it that it is sandboxed (it refuses to bypass permissions as root
                    // otherwise): it is, by corral.
                    ("IS_SANDBOX".to_owned(), "1".to_owned()),
                    // Its background requests (titles, summaries) use the session's model too:
                    // a turn's link admits that model only.
                    ("ANTHROPIC_SMALL_FAST_MODEL".to_owned(), t.model.to_owned()),
                    (
                        "ANTHROPIC_DEFAULT_HAIKU_MODEL".to_owned(),
                        t.model.to_owned(),
                    ),
                ]);
                argv.extend(
                    [
                        "-p",
                        "--output-format",
                        "stream-json",
                        "--verbose",
                        "--permission-mode",
                        "bypassPermissions",
                        "--model",
                    ]
                    .map(str::to_owned),
                );
                argv.push(t.model.to_owned());
                argv.push("--max-turns".to_owned());
                argv.push(t.max_model_turns.to_string());
                if let Some(id) = t.resume {
                    argv.push("--resume".to_owned());
                    argv.push(id.to_owned());
                }
            }
        }
        Launch { argv, env, files }
    }

    /// A parser of one turn's output.
    pub fn parser(self, turn: u32) -> OutputParser {
        OutputParser {
            adapter: self,
            turn,
            thread: None,
            usage: Usage::default(),
            ok: None,
            pending: BTreeMap::new(),
        }
    }
}

/// What one turn needs to launch.
#[derive(Debug, Clone)]
pub struct TurnSpec<'a> {
    /// The CLI's command (its binary, or `node` and its script), from its install.
    pub program: &'a [String],
    /// The real model name, passed to the CLI as its model.
    pub model: &'a str,
    /// The agent's home in the sandbox (its config, its sessions): kept across turns.
    pub home: &'a Path,
    /// corral's LLM proxy as the sandbox reaches it (the link's URL).
    pub proxy_url: &'a str,
    /// The turn's token: the CLI's API key.
    pub token: &'a str,
    /// The session to resume (the CLI's own id, from an earlier turn), if not the first turn.
    pub resume: Option<&'a str>,
    /// The most model turns within this turn, for CLIs that take a limit (claude_code).
    pub max_model_turns: u32,
}

/// How to run one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The command.
    pub argv: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Files to write before it starts (in its home), with their content.
    pub files: Vec<(PathBuf, String)>,
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `s` as a TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Codex's `config.toml`: its one provider is corral's proxy, over the Responses API, its key
/// the turn's token; no approvals, no sandbox of its own (see the module's text), no update
/// check, no analytics (unreachable from the sandbox anyway: trying held every turn's exit
/// back by about 5 s, bench/RESULTS.md), few retries (a refusal of the proxy is an answer,
/// not a glitch).
fn codex_config(t: &TurnSpec<'_>) -> String {
    format!(
        "# Written by corral for this session; rewritten every turn.\n\
         model = {model}\n\
         model_provider = \"corral\"\n\
         approval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\n\
         check_for_update_on_startup = false\n\
         \n\
         [analytics]\n\
         enabled = false\n\
         \n\
         [model_providers.corral]\n\
         name = \"corral\"\n\
         base_url = {base}\n\
         env_key = {key}\n\
         wire_api = \"responses\"\n\
         request_max_retries = 1\n\
         stream_max_retries = 1\n",
        model = toml_str(t.model),
        base = toml_str(&format!("{}/v1", t.proxy_url)),
        key = toml_str(Adapter::Codex.token_env()),
    )
}

/// The most tool calls of claude_code waiting for their result, remembered.
const MAX_PENDING: usize = 1024;
/// The longest session id of a CLI kept (for resuming).
const MAX_THREAD_ID: usize = 128;

/// Turns one turn's output lines into events, remembering the CLI's session id and usage.
#[derive(Debug)]
pub struct OutputParser {
    adapter: Adapter,
    turn: u32,
    thread: Option<String>,
    usage: Usage,
    ok: Option<bool>,
    /// claude_code's tool calls by id, until their result comes.
    pending: BTreeMap<String, SessionEvent>,
}

impl OutputParser {
    /// The events of one line of output (any bytes).
    pub fn line(&mut self, bytes: &[u8]) -> Vec<SessionEvent> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Vec::new();
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return vec![SessionEvent::error(
                codes::AGENTS_OUTPUT,
                "a line of the agent's output is not UTF-8; dropped",
            )];
        };
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return vec![SessionEvent::error(
                codes::AGENTS_OUTPUT,
                format!(
                    "a line of the agent's output is not JSON; dropped: {:?}",
                    text.chars().take(200).collect::<String>()
                ),
            )];
        };
        match self.adapter {
            Adapter::Codex => self.codex(&v),
            Adapter::ClaudeCode => self.claude(&v),
        }
    }

    /// The CLI's own session id, for resuming it (checked: letters, digits, `-` and `_`, never
    /// a leading `-`, so never a flag).
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    /// The tokens the CLI reported.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Whether the CLI reported the turn a success (`None`: it reported nothing).
    pub fn ok(&self) -> Option<bool> {
        self.ok
    }

    fn set_thread(&mut self, id: Option<&str>) {
        if let Some(id) = id.filter(|id| is_thread_id(id)) {
            self.thread = Some(id.to_owned());
        }
    }

    fn codex(&mut self, v: &Value) -> Vec<SessionEvent> {
        let item = &v["item"];
        match v["type"].as_str().unwrap_or("") {
            "thread.started" => {
                self.set_thread(v["thread_id"].as_str());
                Vec::new()
            }
            "turn.started" => vec![SessionEvent::ModelTurn { turn: self.turn }],
            "turn.completed" => {
                let u = &v["usage"];
                self.usage = Usage {
                    input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
                    cached_input_tokens: u["cached_input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
                };
                self.ok = Some(self.ok != Some(false));
                Vec::new()
            }
            "turn.failed" => {
                self.ok = Some(false);
                vec![SessionEvent::error(
                    codes::AGENTS_TURN_FAILED,
                    v["error"]["message"].as_str().unwrap_or("the turn failed"),
                )]
            }
            "error" => vec![SessionEvent::error(
                codes::AGENTS_AGENT_ERROR,
                v["message"]
                    .as_str()
                    .unwrap_or("the agent reported an error"),
            )],
            "item.started" if item["type"] == "command_execution" => {
                vec![codex_command(item, false)]
            }
            "item.completed" => codex_item(item),
            _ => Vec::new(),
        }
    }

    fn claude(&mut self, v: &Value) -> Vec<SessionEvent> {
        match v["type"].as_str().unwrap_or("") {
            "system" => {
                self.set_thread(v["session_id"].as_str());
                Vec::new()
            }
            "assistant" => {
                let mut out = vec![SessionEvent::ModelTurn { turn: self.turn }];
                for part in content(&v["message"]) {
                    match part["type"].as_str().unwrap_or("") {
                        "text" => out.push(SessionEvent::Message {
                            text: clean(part["text"].as_str().unwrap_or("")),
                        }),
                        "tool_use" => {
                            if let Some(ev) = claude_tool(part) {
                                if let Some(id) = part["id"].as_str()
                                    && self.pending.len() < MAX_PENDING
                                {
                                    self.pending.insert(clean(id), ev.clone());
                                }
                                if let SessionEvent::Command { .. } = ev {
                                    out.push(ev);
                                }
                            }
                        }
                        _ => {}
                    }
                }
                out
            }
            "user" => content(&v["message"])
                .filter(|p| p["type"] == "tool_result")
                .filter_map(|p| {
                    let failed = p["is_error"].as_bool().unwrap_or(false);
                    let ev = self.pending.remove(&clean(p["tool_use_id"].as_str()?))?;
                    Some(match ev {
                        SessionEvent::Command { argv, .. } => SessionEvent::Command {
                            argv,
                            exit: Some(i32::from(failed)),
                            done: true,
                        },
                        SessionEvent::FileChange { path, kind, .. } => SessionEvent::FileChange {
                            path,
                            kind,
                            applied: !failed,
                        },
                        other => other,
                    })
                })
                .collect(),
            "result" => {
                self.set_thread(v["session_id"].as_str());
                let u = &v["usage"];
                self.usage = Usage {
                    input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
                    cached_input_tokens: u["cache_read_input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
                };
                let failed = v["is_error"].as_bool().unwrap_or(false);
                self.ok = Some(!failed);
                if failed {
                    let why = v["result"].as_str().or(v["subtype"].as_str());
                    vec![SessionEvent::error(
                        codes::AGENTS_TURN_FAILED,
                        why.unwrap_or("the turn failed"),
                    )]
                } else {
                    Vec::new()
                }
            }
            _ => Vec::new(),
        }
    }
}

/// The parts of a claude message's content.
fn content(message: &Value) -> impl Iterator<Item = &Value> {
    message["content"].as_array().into_iter().flatten()
}

/// A claude tool call as the event its result completes: `Bash` a command, `Write` / `Edit` /
/// `MultiEdit` a file change; other tools none.
fn claude_tool(part: &Value) -> Option<SessionEvent> {
    let input = &part["input"];
    let path = || clean(input["file_path"].as_str().unwrap_or(""));
    match part["name"].as_str()? {
        "Bash" => Some(SessionEvent::Command {
            argv: vec![
                "bash".to_owned(),
                "-c".to_owned(),
                clean(input["command"].as_str().unwrap_or("")),
            ],
            exit: None,
            done: false,
        }),
        "Write" => Some(SessionEvent::FileChange {
            path: path(),
            kind: ChangeKind::Add,
            applied: false,
        }),
        "Edit" | "MultiEdit" | "NotebookEdit" => Some(SessionEvent::FileChange {
            path: path(),
            kind: ChangeKind::Update,
            applied: false,
        }),
        _ => None,
    }
}

/// A codex `command_execution` item as a command event.
fn codex_command(item: &Value, done: bool) -> SessionEvent {
    let line = item["command"].as_str().unwrap_or("");
    let mut argv: Vec<String> = match shlex::split(line) {
        Some(words) => words
            .into_iter()
            .take(MAX_ARGV)
            .map(|w| clean(&w))
            .collect(),
        None => vec![clean(line)],
    };
    argv.truncate(MAX_ARGV);
    let exit = item["exit_code"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    SessionEvent::Command {
        argv,
        exit: if done { exit } else { None },
        done,
    }
}

/// The most file changes of one codex item reported.
const MAX_CHANGES: usize = 256;

/// The events of a codex `item.completed`.
fn codex_item(item: &Value) -> Vec<SessionEvent> {
    match item["type"].as_str().unwrap_or("") {
        "command_execution" => vec![codex_command(item, true)],
        "agent_message" => vec![SessionEvent::Message {
            text: clean(item["text"].as_str().unwrap_or("")),
        }],
        "error" => vec![SessionEvent::error(
            codes::AGENTS_AGENT_ERROR,
            item["message"]
                .as_str()
                .unwrap_or("the agent reported an error"),
        )],
        "file_change" => {
            let applied = item["status"] == "completed";
            item["changes"]
                .as_array()
                .into_iter()
                .flatten()
                .take(MAX_CHANGES)
                .map(|c| SessionEvent::FileChange {
                    path: clean(c["path"].as_str().unwrap_or("")),
                    kind: match c["kind"].as_str().unwrap_or("") {
                        "add" => ChangeKind::Add,
                        "delete" => ChangeKind::Delete,
                        _ => ChangeKind::Update,
                    },
                    applied,
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Whether `id` can be a CLI's session id passed back to it (`resume <id>`): at most
/// [`MAX_THREAD_ID`] letters, digits, `-` and `_`, starting with a letter or digit (never an
/// option).
pub(crate) fn is_thread_id(id: &str) -> bool {
    id.len() <= MAX_THREAD_ID
        && id.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_toml_string_cannot_break_out_of_its_quotes() {
        assert_eq!(toml_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");
    }

    #[test]
    fn a_thread_id_with_other_characters_is_not_kept() {
        let mut p = Adapter::Codex.parser(1);
        p.line(br#"{"type":"thread.started","thread_id":"--last"}"#);
        assert_eq!(p.thread(), None);
        p.line(br#"{"type":"thread.started","thread_id":"01a2-b_c"}"#);
        assert_eq!(p.thread(), Some("01a2-b_c"));
        let mut p = Adapter::Codex.parser(1);
        p.line(br#"{"type":"thread.started","thread_id":"a b"}"#);
        assert_eq!(p.thread(), None);
    }
}
