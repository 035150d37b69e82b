//! The `corral` command line: clap's `Cli`, one module per subcommand, typed exit codes.

/// `println!` for the CLI's stdout: a closed stdout (`corral call ... | head`) ends the process
/// quietly with 141 (128 + SIGPIPE, what a shell shows for a program a pipe closed) instead of
/// the panic `println!` gives.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the CLI's stdout, with `outln!`'s handling of a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

mod cmd;
mod context;
mod error;
mod output;

pub use error::{CliError, CliResult};

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit codes: 0 ok, 1 findings or a refused call, 2 usage or config error; `corral run` ends
/// with the program's own code (see `cmd::run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything is fine.
    Ok,
    /// The check found problems, or the call would be refused.
    Findings,
    /// Bad usage, or a config that does not load.
    Error,
    /// `corral run`: the sandboxed program's exit code, or one of corral's own (124 to 127).
    Code(u8),
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(match e {
            Exit::Ok => 0,
            Exit::Findings => 1,
            Exit::Error => 2,
            Exit::Code(c) => c,
        })
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// For people.
    #[default]
    Human,
    /// For machines: one JSON document on stdout.
    Json,
}

/// `corral --version`'s text after the name: the crate version and the git revision the binary
/// was built from (`build.rs`: `29decca`, `29decca-dirty`, or `unknown` outside a checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("CORRAL_GIT_REVISION"),
    ")"
);

/// Corral: let AI agents use real tools without trusting them.
#[derive(Debug, Parser)]
#[command(
    name = "corral",
    version = VERSION,
    about,
    long_about = None,
    disable_help_subcommand = true,
    after_help = "`corral help reference` prints the reference card (docs/REFERENCE.md, also served as /llms.txt)."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct ConfigArg {
    /// The config file (default: $CORRAL_CONFIG, else ./corral.yaml).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
}

/// `corral agents ...`.
#[derive(Debug, Subcommand)]
enum AgentsCommand {
    /// Install the adapter's CLI (its pinned npm package) into corral's state directory; with
    /// no adapter, every one the config mounts.
    Prepare {
        #[command(flatten)]
        config: ConfigArg,
        /// The adapter (`codex`, `claude_code`).
        adapter: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve ops over HTTP (`POST /ops/{id}`), with the config's policy, auth and storage.
    Serve {
        /// The config file (default: $CORRAL_CONFIG, else ./corral.yaml).
        #[arg(long, short = 'c', value_name = "FILE", conflicts_with_all = ["preset", "root"])]
        config: Option<PathBuf>,
        /// Serve a preset without a config file (needs `--root` for most presets).
        #[arg(long)]
        preset: Option<String>,
        /// The preset's root directory.
        #[arg(long, requires = "preset")]
        root: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: std::net::SocketAddr,
        /// Allow open mode (no auth) beyond loopback or with exec ops mounted: anyone who
        /// reaches the port may call every mounted op, so only for a throwaway lab machine.
        #[arg(long)]
        allow_open: bool,
        /// Largest request body in bytes.
        #[arg(long, default_value_t = corral_server::DEFAULT_MAX_BODY_BYTES)]
        max_body_bytes: usize,
    },
    /// Write a commented starter config.
    Init {
        /// The preset to start from (both `download_only` and `download-only` work).
        #[arg(long, default_value = "workspace_jail")]
        preset: String,
        /// The directory the preset confines ops to (default: the current directory).
        #[arg(long)]
        root: Option<PathBuf>,
        /// Where to write the config.
        #[arg(long, short = 'o', default_value = "corral.yaml")]
        output: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Check a config: load errors, then the lint.
    ///
    /// Exit codes: 0 ok; 1 lint findings (a `lint.*` error, or a warning with `--strict`);
    /// 2 a config error: the file does not load, or an error that is not a lint finding (such
    /// as `policy.scope_required`, a rule that refuses every call).
    CheckConfig {
        #[command(flatten)]
        config: ConfigArg,
        /// Treat warnings as errors.
        #[arg(long)]
        strict: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// List ops with their effects, tier, safety and params; `--effective` shows who may call what.
    Describe {
        #[command(flatten)]
        config: ConfigArg,
        /// Show what the config's policy mounts, for each token and for open-mode callers.
        #[arg(long)]
        effective: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// Show which isolation primitives this host offers and which backends can run here.
    ///
    /// Exit codes: 0 when the configured backend (`isolation.backend`, default `linux`) can
    /// run, 1 when it cannot, 2 for a config that does not load.
    Doctor {
        #[command(flatten)]
        config: ConfigArg,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// Decide one call without running it: the guard steps (autonomy, RBAC, the policy with
    /// every rule considered, confirmation as a dry-run) in the gateway's order.
    ///
    /// Exit codes: 0 when the call would be allowed (even if it would wait for a person's
    /// approval), 1 when a step would refuse it, 2 for a usage or config error.
    Explain {
        #[command(flatten)]
        config: ConfigArg,
        /// The op id, e.g. `files.read`.
        #[arg(long)]
        op: String,
        /// An argument as `name=value` (repeatable). Lists (argv) take JSON or shell words.
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// Call as the token with this id; with `--role`, as a principal with this id and those
        /// roles (what a JWT with this `sub` and roles claim gives).
        #[arg(long)]
        principal: Option<String>,
        /// A role of the caller (repeatable); without `--principal`, an authenticated principal
        /// `role:<ROLE>` with these roles.
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
        /// The kind of a `--role` principal: human, delegated or service.
        #[arg(long, value_name = "KIND", requires = "roles")]
        kind: Option<String>,
        /// Call as the caller whose token (static or JWT) is in this environment variable,
        /// checked as the server checks a bearer token.
        #[arg(long, value_name = "NAME", conflicts_with_all = ["principal", "roles"])]
        token_env: Option<String>,
        /// The autonomy level the run lowered itself to (as `X-Corral-Autonomy`).
        #[arg(long, value_name = "LEVEL")]
        autonomy: Option<String>,
        /// Explain the call as a dry-run one (as `X-Corral-Dry-Run: true`).
        #[arg(long)]
        dry_run: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// Call one op on a server (`POST /ops/{id}`), or in-process with `--local`.
    ///
    /// Arguments are `name=value`; values that look like JSON (numbers, true/false, [...],
    /// {...}, "...") are sent as JSON, others as strings. `argv` takes a JSON array or shell
    /// words. Exit codes: 0 ok, 1 refused or failed call, 2 usage or connection error.
    Call {
        /// The op id, e.g. `files.list`.
        op: String,
        /// Arguments as `name=value`.
        #[arg(value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// The server (default: $CORRAL_SERVER, else http://127.0.0.1:9000).
        #[arg(long, value_name = "URL", conflicts_with = "local")]
        server: Option<String>,
        /// The environment variable holding the token (default: CORRAL_TOKEN, if set).
        #[arg(long, value_name = "NAME", conflicts_with = "local")]
        token_env: Option<String>,
        /// Call in-process, through the same guard chain and audit, without a server.
        #[arg(long)]
        local: bool,
        /// The config file for `--local` (default: $CORRAL_CONFIG, else ./corral.yaml).
        #[arg(long, short = 'c', value_name = "FILE", requires = "local")]
        config: Option<PathBuf>,
        /// For `--local`: call as the token with this id (default: anonymous, when the
        /// config has no tokens).
        #[arg(long, value_name = "ID", requires = "local")]
        principal: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
        /// Exit 0 even when the program the op ran failed (by default such a call, its
        /// result printed, exits 3).
        #[arg(long)]
        exit_zero: bool,
    },
    /// Serve the config's ops as MCP tools over stdio, for one principal.
    Mcp {
        #[command(flatten)]
        config: ConfigArg,
        /// Serve as the token with this id (default: the caller whose token is in the
        /// `--token-env` variable; else anonymous, when the config has no auth).
        #[arg(long, value_name = "ID")]
        principal: Option<String>,
        /// The variable holding this caller's token, a static token or a JWT, checked like the
        /// server checks a bearer token.
        #[arg(long, value_name = "NAME", default_value = "CORRAL_TOKEN")]
        token_env: String,
    },
    /// Approve (or deny) a pending guarded call, as the person who raised it.
    Confirm {
        /// The action id from the `confirmation.required` answer.
        action_id: String,
        /// Deny instead of approving.
        #[arg(long)]
        deny: bool,
        #[command(flatten)]
        remote: Remote,
    },
    /// Show the most recent audit events of a running server (role admin), newest first.
    Audit {
        /// How many events (1 to 1000).
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: u32,
        /// Only the calls of this run.
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// Only the calls of this op.
        #[arg(long, value_name = "OP")]
        op: Option<String>,
        /// Only the calls of this principal.
        #[arg(long, value_name = "ID")]
        principal: Option<String>,
        /// Only the calls of this purpose: `live` (they act on the world) or `simulation` (a
        /// lab run's calls, answered by its mocks).
        #[arg(long, value_name = "PURPOSE", value_parser = purpose_name)]
        purpose: Option<String>,
        /// The page after this cursor: the `--after` value the previous page printed last
        /// (`next` in JSON); none for the newest events.
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
    /// Run one command in the sandbox, with its own stdio and exit code: `corral run -- make test`.
    ///
    /// The system directories are visible read-only; `--profile` decides the current directory
    /// (`workspace`: read-write, the default; `readonly`; `none`: not visible, the program runs
    /// in an empty `/tmp`). Home and everything else is hidden; the network is off unless
    /// `--net loopback`; the environment is PATH, TERM, the locale, TZ, `HOME=/tmp` and what
    /// `--env` adds. Exit codes: the program's (128+N when signal N ended it), 124 when
    /// `--timeout` killed it, 125 when corral could not run it (this host cannot isolate, bad
    /// usage, a bad `--config`, or a change of the program's refused at the apply), 126 when the
    /// program cannot be executed, 127 when it is not found.
    ///
    /// The program's writes go through a copy-on-write layer, applied to the host when it ended:
    /// a new `.git` or `.corral` (at any depth) or what is over `--write-quota` is refused
    /// there, one line per refused path on stderr, and no set-id bit reaches the host.
    Run(cmd::run::Args),
    /// The lab: synthetic inputs, scenarios of steps and mocks, runs against the mocks, and the
    /// before/after comparison verdict (`docs/lab.md`).
    ///
    /// On a server (`--server`, the token from $CORRAL_TOKEN) or in-process (`--local`).
    /// Exit codes: 0 ok, 1 a refusal, a failed run or a `regressed` verdict, 2 usage or
    /// connection error.
    Sandbox(cmd::sandbox::Args),
    /// The coding-agent CLIs corral hosts (`agents:`): `corral agents prepare [ADAPTER]`
    /// installs them ahead of use (an image build, `install: {mode: build}`).
    ///
    /// Exit codes: 0 installed, 1 the install was refused or failed, 2 usage or config error.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Print the reference card (`corral help reference`), or the help of the given
    /// subcommand(s).
    Help {
        /// `reference`, or a subcommand (and its subcommands: `corral help sandbox scenarios`).
        topic: Vec<String>,
    },
    /// Check a server's `/healthz`: exit 0 when healthy, 1 when not or unreachable.
    Healthcheck {
        /// The server (default: $CORRAL_SERVER, else http://127.0.0.1:9000).
        #[arg(long, value_name = "URL")]
        server: Option<String>,
        /// How long to wait for the answer, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 5000)]
        timeout_ms: u64,
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

/// Where a command that talks to a running server sends its request, as whom, and how it
/// prints the answer.
#[derive(Debug, clap::Args)]
pub(crate) struct Remote {
    /// The server (default: $CORRAL_SERVER, else http://127.0.0.1:9000).
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
    /// The environment variable holding the token (default: CORRAL_TOKEN, if set).
    #[arg(long, value_name = "NAME")]
    pub(crate) token_env: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

/// Parses the command line, runs the subcommand, and returns its exit code.
/// `--purpose`: the name of a run purpose (`live`, `simulation`, ...), as audited.
fn purpose_name(s: &str) -> Result<String, String> {
    use corral_guard::runs::RunPurpose;
    RunPurpose::parse(s)
        .map(|p| p.as_str().to_owned())
        .ok_or_else(|| {
            let names: Vec<&str> = RunPurpose::ALL.iter().map(|p| p.as_str()).collect();
            format!("a purpose is one of {}", names.join(", "))
        })
}

pub fn run() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // `corral run` keeps 2 for the program: its own usage errors are 125.
            let running = std::env::args_os().nth(1).is_some_and(|a| a == "run");
            let code = match (e.use_stderr(), running) {
                (false, _) => Exit::Ok,
                (true, false) => Exit::Error,
                (true, true) => Exit::Code(cmd::run::EXIT_CANNOT_RUN),
            };
            let _ = e.print();
            return code.into();
        }
    };
    match run_cli(cli) {
        Ok(exit) => exit.into(),
        Err(e) => {
            // The one place a failure is printed.
            e.print();
            e.exit().into()
        }
    }
}

/// `corral agents ...`.
fn agents(command: AgentsCommand) -> CliResult {
    match command {
        AgentsCommand::Prepare {
            config,
            adapter,
            format,
        } => cmd::agents::prepare(config.config, adapter, format),
    }
}

/// Runs a parsed command line: the exit code, or the failure `run` prints.
pub fn run_cli(cli: Cli) -> CliResult {
    match cli.command {
        Command::Serve {
            config,
            preset,
            root,
            listen,
            allow_open,
            max_body_bytes,
        } => cmd::serve::run(cmd::serve::Args {
            config,
            preset,
            root,
            listen,
            allow_open,
            max_body_bytes,
        }),
        Command::Init {
            preset,
            root,
            output,
            force,
        } => cmd::init::run(&preset, root, &output, force),
        Command::CheckConfig {
            config,
            strict,
            format,
        } => cmd::check_config::run(config.config, strict, format),
        Command::Describe {
            config,
            effective,
            format,
        } => cmd::describe::run(config.config, effective, format),
        Command::Doctor { config, format } => cmd::doctor::run(config.config, format),
        Command::Explain {
            config,
            op,
            args,
            principal,
            roles,
            kind,
            token_env,
            autonomy,
            dry_run,
            format,
        } => cmd::explain::run(cmd::explain::Args {
            config: config.config,
            op,
            args,
            principal,
            roles,
            kind,
            token_env,
            autonomy,
            dry_run,
            format,
        }),
        Command::Call {
            op,
            args,
            server,
            token_env,
            local,
            config,
            principal,
            format,
            exit_zero,
        } => cmd::call::run(cmd::call::Args {
            op,
            args,
            server,
            token_env,
            format,
            local,
            config,
            principal,
            exit_zero,
        }),
        Command::Mcp {
            config,
            principal,
            token_env,
        } => cmd::mcp::run(cmd::mcp::Args {
            config: config.config,
            principal,
            token_env,
        }),
        Command::Confirm {
            action_id,
            deny,
            remote,
        } => cmd::confirm::run(&action_id, deny, remote),
        Command::Audit {
            limit,
            run,
            op,
            principal,
            purpose,
            after,
            remote,
        } => {
            let filters = [run, op, principal, purpose, after];
            cmd::audit::run(limit, filters, remote)
        }
        Command::Run(args) => cmd::run::run(args),
        Command::Sandbox(args) => cmd::sandbox::run(args),
        Command::Agents(command) => agents(command),
        Command::Help { topic } => cmd::help::run(&topic),
        Command::Healthcheck {
            server,
            timeout_ms,
            format,
        } => cmd::healthcheck::run(server, std::time::Duration::from_millis(timeout_ms), format),
    }
}
