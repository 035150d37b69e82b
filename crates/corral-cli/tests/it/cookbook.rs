//! docs/cookbook/: every recipe run as written (docs/cookbook/README.md says how): its config
//! passes `check-config --strict` and each command line does what its `# -> ...` says, against
//! a real `corral serve` (two, for the replicas recipe, on a fresh PostgreSQL schema).

#![allow(
    clippy::expect_used,
    reason = "a recipe's harness that cannot set up (a temp dir, a port, sh) has nothing to test"
)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../corral-store/tests/support/pg_schema.rs"]
#[allow(
    dead_code,
    clippy::unwrap_used,
    clippy::panic,
    reason = "corral-store's test helper, shared as it is: the cookbook uses `Schema::create`"
)]
pub(crate) mod pg_schema;

/// The recipes, by file name: each has its test below, and no file goes untested.
const RECIPES: [&str; 9] = [
    "01-download-only.md",
    "02-grading-shell.md",
    "03-mcp-host.md",
    "04-per-user-directories.md",
    "05-per-role-rate-limits.md",
    "06-custom-op-with-confirmation.md",
    "07-read-only-observer.md",
    "08-two-replicas-on-postgres.md",
    "09-unattended-ci-agent.md",
];

fn cookbook() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cookbook")
}

/// The fenced blocks of `lang` in `text`, in order.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line.trim_end() == format!("```{lang}") => block = Some(String::new()),
            None => {}
            Some(body) if line.trim_end() == "```" => {
                out.push(std::mem::take(body));
                block = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

fn secret() -> String {
    let mut bytes = [0u8; 20];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read as _;
        f.read_exact(&mut bytes)
    });
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One recipe's run: its directory, the substitutions, the environment and its servers.
struct Run {
    dir: PathBuf,
    subs: Vec<(String, String)>,
    env: HashMap<String, String>,
    servers: Vec<Child>,
    action: Option<String>,
    log: String,
}

impl Drop for Run {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Run {
    fn sub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (from, to) in &self.subs {
            out = out.replace(from, to);
        }
        if let Some(a) = &self.action {
            out = out.replace("$ACTION_ID", a);
        }
        out
    }

    fn sh(&self, line: &str) -> std::process::Output {
        Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(&self.dir)
            .env_clear()
            .envs(&self.env)
            .output()
            .expect("sh runs")
    }

    /// `corral serve ... &`: started in the background; returns once it listens.
    fn serve(&mut self, line: &str) {
        let cmd = line.trim_end_matches('&').trim();
        let n = self.servers.len();
        let log = std::fs::File::create(self.dir.join(format!("serve{n}.log"))).expect("a log");
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .current_dir(&self.dir)
            .env_clear()
            .envs(&self.env)
            .stdout(Stdio::from(log.try_clone().expect("the log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("corral serve starts");
        self.servers.push(child);
        let port: u16 = cmd
            .split("127.0.0.1:")
            .nth(1)
            .and_then(|p| p.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .expect("`corral serve` lines name --listen 127.0.0.1:PORT");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "`{cmd}` did not listen: {}",
                std::fs::read_to_string(self.dir.join(format!("serve{n}.log"))).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs one line; a failure is written to the log and returned.
    fn line(&mut self, raw: &str) -> Result<(), String> {
        let (cmd, want) = match raw.rsplit_once("# -> ") {
            Some((c, w)) => (c.trim(), Some(w.trim())),
            None => (raw.trim(), None),
        };
        let cmd = self.sub(cmd);
        if cmd.starts_with("corral serve ") && cmd.ends_with('&') {
            self.serve(&cmd);
            return Ok(());
        }
        if let Some(assign) = cmd.strip_prefix("export ") {
            let name = assign.split('=').next().unwrap_or_default().to_owned();
            let out = self.sh(&format!("{cmd}; printf %s \"${name}\""));
            self.env
                .insert(name, String::from_utf8_lossy(&out.stdout).into_owned());
            return Ok(());
        }
        // A check of a file the server writes as calls end is tried again for a while.
        let tries = if cmd.starts_with("grep ") { 50 } else { 1 };
        let mut last = String::new();
        for _ in 0..tries {
            let out = self.sh(&cmd);
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if let Some(id) = action_id(&text) {
                self.action = Some(id);
            }
            let ok = out.status.success();
            let good = match want {
                None | Some("ok") => ok,
                Some("202") => text.contains("confirmation.required"),
                Some(code) => !ok && text.contains(code),
            };
            if good {
                return Ok(());
            }
            last = format!("exit {:?}: {text}", out.status.code());
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = writeln!(
            self.log,
            "`{raw}` should end `{}`; it ended {last}",
            want.unwrap_or("ok")
        );
        Err(last)
    }
}

/// The action id a `202 confirmation.required` answer names.
fn action_id(text: &str) -> Option<String> {
    let at = text.find("/confirmations/")? + "/confirmations/".len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Runs the recipe `name` as docs/cookbook/README.md says; panics naming each line that did
/// not do what it says.
fn run_recipe(name: &str) {
    let text = std::fs::read_to_string(cookbook().join(name)).expect("the recipe");
    let config = blocks(&text, "yaml")
        .into_iter()
        .next()
        .expect("a recipe's first yaml block is its config");
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    let mut subs = vec![("/srv/corral".to_owned(), dir.display().to_string())];
    for port in ["9000", "9001"] {
        subs.push((
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{}", crate::call::free_port()),
        ));
    }
    let mut env: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| matches!(k.as_str(), "HOME" | "LANG" | "TMPDIR" | "USER"))
        .collect();
    let bin = Path::new(env!("CARGO_BIN_EXE_corral"))
        .parent()
        .expect("the binary's directory")
        .to_owned();
    env.insert(
        "PATH".into(),
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    );
    for word in config.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.ends_with("_TOKEN") && word.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
            env.insert(word.to_owned(), secret());
        }
    }
    let mut config = config;
    let mut _schema = None;
    if let Some(at) = config.find("postgres://") {
        let end = config[at..]
            .find(['"', ' ', '\n', '}'])
            .map_or(config.len(), |e| at + e);
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        let Some(schema) = rt.block_on(pg_schema::Schema::create("cookbook")) else {
            return; // Outside CI without a server: said why, skipped.
        };
        config.replace_range(at..end, &schema.url);
        _schema = Some(schema);
    }
    let mut run = Run {
        dir: dir.clone(),
        subs,
        env,
        servers: Vec::new(),
        action: None,
        log: String::new(),
    };
    std::fs::write(dir.join("corral.yaml"), run.sub(&config)).expect("the config");
    let mut failed = 0;
    for block in blocks(&text, "sh") {
        for line in block.lines() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            if run.line(line).is_err() {
                failed += 1;
            }
        }
    }
    assert_eq!(failed, 0, "docs/cookbook/{name}:\n{}", run.log);
}

#[test]
fn every_recipe_in_the_cookbook_has_its_test() {
    let mut found: Vec<String> = std::fs::read_dir(cookbook())
        .expect("docs/cookbook")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "README.md")
        .collect();
    found.sort();
    assert_eq!(found, RECIPES, "a new recipe needs its test here");
    let index = std::fs::read_to_string(cookbook().join("README.md")).expect("the index");
    for r in RECIPES {
        assert!(index.contains(&format!("({r})")), "the index links {r}");
    }
}

#[test]
fn cookbook_download_only() {
    run_recipe(RECIPES[0]);
}

#[test]
fn cookbook_grading_shell() {
    run_recipe(RECIPES[1]);
}

#[test]
fn cookbook_mcp_host() {
    run_recipe(RECIPES[2]);
}

#[test]
fn cookbook_per_user_directories() {
    run_recipe(RECIPES[3]);
}

#[test]
fn cookbook_per_role_rate_limits() {
    run_recipe(RECIPES[4]);
}

#[test]
fn cookbook_custom_op_with_confirmation() {
    run_recipe(RECIPES[5]);
}

#[test]
fn cookbook_read_only_observer() {
    run_recipe(RECIPES[6]);
}

#[test]
fn cookbook_two_replicas_on_postgres() {
    run_recipe(RECIPES[7]);
}

#[test]
fn cookbook_unattended_ci_agent() {
    run_recipe(RECIPES[8]);
}
