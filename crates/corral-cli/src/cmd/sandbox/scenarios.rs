//! `corral sandbox scenarios create | update | list | get | run`.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use corral_client::sandbox::{PageRequest, RunRequest, Scenario, ScenarioRequest, Step};
use serde_json::Value;

use super::{Conn, Lab, Progress, printable, printable_text};
use crate::{CliError, CliResult, Exit, Format};

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Store a scenario: its steps (`--steps-file`: `[{"input", "expected"?}]`, or the
    /// `{"samples": [...]}` of `generate --format json`) and its mocks (`--mocks-file`:
    /// `[{"resource", "response"}]` or `[{"op", "args", "response" | "error"}]`).
    Create {
        /// A short name (at most 200 bytes).
        #[arg(long)]
        name: String,
        /// What the scenario checks (at most 4096 bytes).
        #[arg(long)]
        description: Option<String>,
        /// The steps, a JSON file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        steps_file: PathBuf,
        /// The mocks, a JSON file (default: none, so every lookup is a mock miss).
        #[arg(long, value_name = "FILE")]
        mocks_file: Option<PathBuf>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Replace a scenario's name, description, steps and mocks with a file's, and bump its
    /// version.
    ///
    /// The file (`-`: stdin) is the scenario as JSON: `{"name", "description"?, "steps":
    /// [{"input", "expected"?}] | "samples": [...], "mocks"?: [...]}` (what `scenarios get -o
    /// json` prints is accepted: its `id`, `tenant`, `version` and times are ignored). With
    /// `--version V` the update applies only if the scenario is still at version V (else
    /// `lab.version_conflict`: read it again and reapply); without it, it is unconditional.
    Update {
        /// The scenario's id.
        id: String,
        /// The scenario, a JSON file (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// Update only if the scenario is still at this version (the one you read).
        #[arg(long, value_name = "V")]
        version: Option<i64>,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the tenant's scenarios, newest first.
    List {
        /// Rows per page.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Start after this cursor (the `next` of the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Show one scenario: its steps and mocks.
    Get {
        /// The scenario's id.
        id: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run a scenario against its mocks and print the run record (the run finishes first).
    ///
    /// Without `--workflow` or `--program` the agent is the identity agent: a step's input is
    /// the resource it asks for. `--program NAME` runs an external program the config declares
    /// under `sandbox.programs`, in the `linux` backend. Without `--scorer` the run is "executed, not scored", never a pass. Exit
    /// codes: 0 the run completed (agent failures such as mock misses included) and did not
    /// fail its scorer; 1 it failed, or its scorer failed it, or the lab refused; 2 usage or
    /// connection error.
    Run {
        /// The scenario's id.
        id: String,
        /// The variant's label (e.g. `baseline`, `candidate`).
        #[arg(long, default_value = "default")]
        variant: String,
        /// A declarative workflow (YAML file) as the agent under test.
        #[arg(long, value_name = "FILE", conflicts_with = "program")]
        workflow: Option<PathBuf>,
        /// An external program declared under `sandbox.programs` as the agent under test (run
        /// in the `linux` backend, reaching only corral's API for its run).
        #[arg(long, value_name = "NAME")]
        program: Option<String>,
        /// The seed (same scenario, variant and seed: the same outputs).
        #[arg(long, value_name = "S")]
        seed: Option<u64>,
        /// Trials per step (pass@k and pass^k with a scorer).
        #[arg(long, value_name = "K")]
        trials: Option<u32>,
        /// The scorer against the steps' expected outputs: exact, regex, json_path, or
        /// command:NAME (a scorer declared under `sandbox.scorers`, run in the `linux` backend).
        #[arg(long, value_name = "S")]
        scorer: Option<String>,
        /// The isolation the variant runs under: `inproc-mock` (identity agent, workflow) or
        /// `linux` (a program); the default is the variant's own. Refused where it cannot be
        /// given, never run without it.
        #[arg(long, value_name = "BACKEND")]
        isolation: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
}

pub(crate) fn run(c: Command) -> CliResult {
    match c {
        Command::Create {
            name,
            description,
            steps_file,
            mocks_file,
            conn,
        } => {
            let req = ScenarioRequest {
                name,
                description,
                steps: Some(steps_from(
                    &super::read_json(&steps_file, "steps file")?,
                    &steps_file,
                )?),
                samples: None,
                mocks: Some(match &mocks_file {
                    Some(p) => mocks_from(super::read_json(p, "mocks file")?, p)?,
                    None => Vec::new(),
                }),
                version: None,
            };
            let lab = Lab::open(&conn)?;
            let s = lab.create_scenario(&req)?;
            match conn.format {
                Format::Json => crate::output::print_json(&s),
                Format::Human => outln!(
                    "created scenario {} ({}, version {}): {} steps, {} mocks",
                    s.id,
                    printable(&s.name),
                    s.version,
                    s.steps.len(),
                    s.mocks.len()
                ),
            }
            Ok(Exit::Ok)
        }
        Command::Update {
            id,
            file,
            version,
            conn,
        } => update(&id, &file, version, &conn),
        Command::List { limit, after, conn } => {
            let lab = Lab::open(&conn)?;
            let page = lab.list_scenarios(&PageRequest { limit, after })?;
            match conn.format {
                Format::Json => crate::output::print_json(&page),
                Format::Human => {
                    if page.items.is_empty() {
                        outln!("no scenarios");
                    }
                    for s in &page.items {
                        outln!("{}  v{}  {}", s.id, s.version, printable(&s.name));
                    }
                    if let Some(next) = &page.next {
                        outln!("more: --after {}", printable(next));
                    }
                }
            }
            Ok(Exit::Ok)
        }
        Command::Get { id, conn } => {
            let lab = Lab::open(&conn)?;
            let s = lab.scenario(&id)?;
            match conn.format {
                Format::Json => crate::output::print_json(&s),
                Format::Human => print_scenario(&s),
            }
            Ok(Exit::Ok)
        }
        Command::Run {
            id,
            variant,
            workflow,
            program,
            seed,
            trials,
            scorer,
            isolation,
            conn,
        } => {
            let req = RunRequest {
                variant,
                workflow: workflow
                    .as_deref()
                    .map(|p| super::read_text(p, "workflow"))
                    .transpose()?,
                program,
                seed,
                trials,
                scorer,
                isolation,
            };
            let lab = Lab::open(&conn)?;
            let run = {
                let _p = Progress::start(
                    format!("running scenario {id} ({} trials)", trials.unwrap_or(1)),
                    trials.is_some_and(|t| t > 1),
                );
                lab.run(&id, &req)?
            };
            match conn.format {
                Format::Json => crate::output::print_json(&run),
                Format::Human => super::runs::print_run(&run),
            }
            Ok(super::runs::run_exit(&run))
        }
    }
}

/// `scenarios update ID --file F [--version V]`.
fn update(id: &str, file: &Path, version: Option<i64>, conn: &Conn) -> CliResult {
    let mut req = update_from(super::read_json(file, "scenario file")?, file)?;
    req.version = version;
    let lab = Lab::open(conn)?;
    let s = lab.update_scenario(id, &req)?;
    match conn.format {
        Format::Json => crate::output::print_json(&s),
        Format::Human => outln!(
            "updated scenario {} ({}, version {}): {} steps, {} mocks",
            s.id,
            printable(&s.name),
            s.version,
            s.steps.len(),
            s.mocks.len()
        ),
    }
    Ok(Exit::Ok)
}

/// The steps a `--steps-file` holds: a list of steps, `{"steps": [...]}`, or a synthetic batch
/// `{"samples": [{key, input}]}` (each sample's input a step's input).
fn steps_from(v: &Value, path: &Path) -> Result<Vec<Step>, CliError> {
    let bad = |why: &str| {
        CliError::usage(format!(
            "the steps file `{}` {why}; give `[{{\"input\": \"...\", \"expected\": ...}}]` or the output of `corral sandbox generate --format json`",
            path.display()
        ))
    };
    let list = match v {
        Value::Array(_) => v,
        Value::Object(o) => match (o.get("samples"), o.get("steps")) {
            (Some(s), None) => s,
            (None, Some(s)) => s,
            (Some(_), Some(_)) => return Err(bad("has both `samples` and `steps`")),
            (None, None) => return Err(bad("has neither `samples` nor `steps`")),
        },
        _ => return Err(bad("is neither a list nor an object")),
    };
    let Value::Array(items) = list else {
        return Err(bad("holds steps that are not a list"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::Object(o) => match o.get("input") {
                Some(Value::String(input)) => Ok(Step {
                    input: input.clone(),
                    expected: o.get("expected").cloned(),
                }),
                _ => Err(bad(&format!(
                    "has a step {} without a string `input`",
                    i + 1
                ))),
            },
            _ => Err(bad(&format!("has a step {} that is not an object", i + 1))),
        })
        .collect()
}

/// The keys of a scenario as `scenarios get -o json` prints it that an update does not send
/// (the store sets them).
const STORED_KEYS: &[&str] = &["id", "tenant", "version", "created_ms", "updated_ms"];

/// The update a `scenarios update --file` holds: a scenario object (a stored one's own keys
/// ignored; `--version`, not the file, says which version the change is based on).
fn update_from(v: Value, path: &Path) -> Result<ScenarioRequest, CliError> {
    let bad = |why: String| {
        CliError::usage(format!(
            "the scenario file `{}` {why}; give `{{\"name\": \"...\", \"steps\": [{{\"input\": \"...\"}}], \"mocks\": [...]}}` (what `scenarios get -o json` prints works)",
            path.display()
        ))
    };
    let Value::Object(mut o) = v else {
        return Err(bad("is not a JSON object".to_owned()));
    };
    for k in STORED_KEYS {
        o.remove(*k);
    }
    let known = ["name", "description", "steps", "samples", "mocks"];
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(format!(
            "has the key {}, which a scenario does not take (keys: {})",
            printable(k),
            known.join(", ")
        )));
    }
    serde_json::from_value(Value::Object(o)).map_err(|e| bad(format!("is not a scenario: {e}")))
}

/// The mocks a `--mocks-file` holds: a list, or `{"mocks": [...]}`.
fn mocks_from(v: Value, path: &Path) -> Result<Vec<Value>, CliError> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Object(mut o) => match o.remove("mocks") {
            Some(Value::Array(items)) => Ok(items),
            _ => Err(mocks_bad(path)),
        },
        _ => Err(mocks_bad(path)),
    }
}

fn mocks_bad(path: &Path) -> CliError {
    CliError::usage(format!(
        "the mocks file `{}` is not a list of mocks; give `[{{\"resource\": \"...\", \"response\": \"...\"}}]` or `[{{\"op\": \"...\", \"args\": {{}}, \"response\": ...}}]`",
        path.display()
    ))
}

fn print_scenario(s: &Scenario) {
    outln!(
        "scenario {} ({}), version {}",
        s.id,
        printable(&s.name),
        s.version
    );
    if !s.description.is_empty() {
        outln!("  {}", printable_text(&s.description));
    }
    outln!("steps: {}", s.steps.len());
    for (i, step) in s.steps.iter().enumerate() {
        match &step.expected {
            Some(e) => outln!(
                "  {}  {}  expected {}",
                i + 1,
                printable_text(&step.input),
                printable(&e.to_string())
            ),
            None => outln!("  {}  {}", i + 1, printable_text(&step.input)),
        }
    }
    outln!("mocks: {}", s.mocks.len());
    for m in &s.mocks {
        let key = match (m.get("resource"), m.get("op")) {
            (Some(Value::String(r)), _) => format!("resource {}", printable(r)),
            (_, Some(Value::String(op))) => format!(
                "op {} {}",
                printable(op),
                printable(&m.get("args").map(Value::to_string).unwrap_or_default())
            ),
            _ => printable(&m.to_string()),
        };
        outln!("  {key}");
    }
}
