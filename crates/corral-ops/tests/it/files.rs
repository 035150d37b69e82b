//! The file ops through a real policy decision: protected locations and deny patterns hold for
//! where a path really leads (issue 11 items 2, 3, 4 and 9), and a path too long for the kernel
//! is the caller's error.

use std::error::Error;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;

use corral_exec::mock::MockBackend;
use corral_ops::files::{FileOp, FileOpKind};
use corral_ops::{Op, OpCtx, OpError, OpOutput};
use corral_policy::scope::{PathScope, PathScopeSpec};
use corral_policy::{
    Args, Catalog, Decision, Engine, Policy, Principal, Request, Rule, Selector, codes,
};

type TestResult = Result<(), Box<dyn Error>>;

/// A workspace: `ws` is the root the rules name; `state` is corral's state dir beside it.
struct Ws {
    dir: tempfile::TempDir,
}

impl Ws {
    fn new() -> Result<Self, Box<dyn Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("ws/data"))?;
        std::fs::write(dir.path().join("ws/.env"), "SECRET=1\n")?;
        std::fs::write(dir.path().join("ws/ok.txt"), "fine\n")?;
        std::fs::create_dir_all(dir.path().join("ws/.git"))?;
        std::fs::write(dir.path().join("ws/.git/config"), "[core]\n")?;
        Ok(Self { dir })
    }

    fn root(&self) -> String {
        self.dir.path().join("ws").to_string_lossy().into_owned()
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join("ws").join(rel)
    }

    /// Every file op on the root, `**/.env` denied, `extra` protected (corral's own files).
    fn engine(&self, extra: &[&Path], deny_rule: Option<&str>) -> Result<Engine, Box<dyn Error>> {
        let catalog = Catalog::builtin();
        let scope = PathScope::compile(PathScopeSpec {
            roots: vec![self.root()],
            deny: vec!["**/.env".to_owned()],
            ..PathScopeSpec::default()
        })?;
        let mut policy = Policy::new()
            .rule(Rule::allow("files", vec![Selector::parse("files.*", &catalog)?]).paths(scope));
        if let Some(root) = deny_rule {
            let deny = PathScope::compile_deny(PathScopeSpec {
                roots: vec![root.to_owned()],
                ..PathScopeSpec::default()
            })?;
            policy = policy.rule(
                Rule::deny("no-private", vec![Selector::parse("files.*", &catalog)?])
                    .paths(deny)
                    .reason("private is off limits"),
            );
        }
        for p in extra {
            policy = policy.protect(&p.to_string_lossy());
        }
        Ok(Engine::new(catalog, policy))
    }
}

/// Decides the call with `e` and, when allowed, runs the op: the policy's refusal or the op's.
async fn call(e: &Engine, op: &str, args: Args) -> Result<OpOutput, OpError> {
    let principal = Principal::new("agent", &[]);
    let decision = e.decide(&Request {
        op,
        principal: &principal,
        args: &args,
    });
    let grant = match decision {
        Decision::Allowed(a) => *a,
        other => {
            return Err(OpError::new(
                other.code().unwrap_or("?"),
                format!("{other:?}"),
            ));
        }
    };
    let spec = e
        .catalog()
        .get(op)
        .cloned()
        .ok_or_else(|| OpError::new("test.setup", "no such op"))?;
    let kind = match op {
        "files.list" => FileOpKind::List,
        "files.stat" => FileOpKind::Stat,
        "files.read" => FileOpKind::Read,
        "files.write" => FileOpKind::Write,
        "files.delete" => FileOpKind::Delete,
        _ => FileOpKind::Download,
    };
    FileOp::new(spec.clone(), kind)
        .call(OpCtx {
            op: spec,
            principal,
            act_chain: Vec::new(),
            args,
            grant,
            backend: Arc::new(MockBackend::default()),
            protected: Vec::new(),
            request_id: "test".to_owned(),
            url_check: None,
            egress_log: None,
        })
        .await
}

fn read_args(path: &str) -> Args {
    Args::new().str("path", path)
}

fn write_args(path: &str, content: &str) -> Args {
    Args::new().str("path", path).str("content", content)
}

fn refused(r: &Result<OpOutput, OpError>, code: &str) -> bool {
    matches!(r, Err(e) if e.code == code)
}

#[tokio::test]
async fn writing_git_metadata_is_refused_by_name_and_through_a_symlink() -> TestResult {
    // issue 11 item 2: git metadata (`core.fsmonitor` in .git/config runs on the host's next
    // `git status`).
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    let r = call(
        &e,
        "files.write",
        write_args(".git/config", "[core]\nfsmonitor = sh\n"),
    )
    .await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    symlink(".git", ws.path("gitlink"))?;
    let r = call(&e, "files.write", write_args("gitlink/config", "x")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    let msg = r.err().map(|e| e.message).unwrap_or_default();
    assert!(msg.contains("`.git` is a protected name"), "{msg}");
    let r = call(&e, "files.write", write_args("gitlink/hooks-new", "x")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert_eq!(std::fs::read_to_string(ws.path(".git/config"))?, "[core]\n");
    assert!(!ws.path(".git/hooks-new").exists());
    // A new `.git` anywhere cannot be planted either.
    let r = call(&e, "files.write", write_args("data/.git/HEAD", "x")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    let r = call(&e, "files.delete", read_args("gitlink/config")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert!(ws.path(".git/config").exists());
    // Reading git metadata stays as the policy decides.
    let r = call(&e, "files.read", read_args("gitlink/config")).await;
    assert!(r.is_ok(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn a_git_head_that_would_make_a_bare_repository_is_refused() -> TestResult {
    // issue 11 item 2, found by the attack on the fix: `src/HEAD` (`ref: refs/heads/main`) +
    // `src/config` + `src/objects/` + `src/refs/` is a repository the host's git runs from
    // `src/` with no `.git` anywhere. Without a valid HEAD git does not take it for one.
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    let r = call(
        &e,
        "files.write",
        write_args("data/HEAD", "ref: refs/heads/main\n"),
    )
    .await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    let msg = r.err().map(|e| e.message).unwrap_or_default();
    assert!(msg.contains("git `HEAD`"), "{msg}");
    let oid = "0123456789abcdef0123456789abcdef01234567\n";
    let r = call(&e, "files.write", write_args("data/HEAD", oid)).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert!(!ws.path("data/HEAD").exists());
    // A HEAD that is no git HEAD is an ordinary file.
    let r = call(&e, "files.write", write_args("data/HEAD", "notes\n")).await;
    assert!(r.is_ok(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn nothing_inside_a_bare_repository_already_in_the_root_may_change() -> TestResult {
    // Found by the attack on issue 12: a bare repository in the workspace (a fixture or a
    // mirror, `fixture.git/` with no `.git` in its path) got `core.fsmonitor` in its config or
    // a hook through files.write, and the host's git ran it.
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    std::fs::create_dir_all(ws.path("fixture.git/hooks"))?;
    std::fs::create_dir_all(ws.path("fixture.git/objects"))?;
    std::fs::create_dir_all(ws.path("fixture.git/refs"))?;
    std::fs::write(ws.path("fixture.git/HEAD"), "ref: refs/heads/main\n")?;
    std::fs::write(ws.path("fixture.git/config"), "[core]\n\tbare = true\n")?;
    for target in ["fixture.git/config", "fixture.git/hooks/post-checkout"] {
        let r = call(
            &e,
            "files.write",
            write_args(target, "[core]\n\tfsmonitor = touch /tmp/pwned\n"),
        )
        .await;
        assert!(refused(&r, codes::POLICY_PATH_DENIED), "{target}: {r:?}");
        let msg = r.err().map(|e| e.message).unwrap_or_default();
        assert!(msg.contains("inside a git repository"), "{msg}");
    }
    let r = call(&e, "files.delete", read_args("fixture.git/config")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path("fixture.git/config"))?,
        "[core]\n\tbare = true\n"
    );
    assert!(!ws.path("fixture.git/hooks/post-checkout").exists());
    // Beside it, writes go on as before.
    let r = call(&e, "files.write", write_args("notes.txt", "hello\n")).await;
    assert!(r.is_ok(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn deleting_a_directory_that_holds_a_protected_name_is_refused() -> TestResult {
    // issue 11 item 2: a delete takes along what is beneath.
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    std::fs::create_dir_all(ws.path("vendor/lib/.git"))?;
    let r = call(&e, "files.delete", read_args("vendor/lib")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert!(ws.path("vendor/lib/.git").exists());
    std::fs::create_dir_all(ws.path("vendor/empty"))?;
    let r = call(&e, "files.delete", read_args("vendor/empty")).await;
    assert!(r.is_ok(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn corrals_state_and_config_are_refused_for_reads_and_writes_through_a_symlink() -> TestResult
{
    // issue 11 items 3 and 4: the state dir and the config file, compared resolved.
    let ws = Ws::new()?;
    std::fs::create_dir_all(ws.path("state"))?;
    std::fs::write(ws.path("state/corral.db"), "db")?;
    std::fs::write(ws.path("corral.yaml"), "version: 1\n")?;
    let state = std::fs::canonicalize(ws.path("state"))?;
    let config = std::fs::canonicalize(ws.path("corral.yaml"))?;
    let e = ws.engine(&[&state, &config], None)?;
    symlink("state", ws.path("st"))?;
    symlink("corral.yaml", ws.path("cfg"))?;
    for (op, args) in [
        ("files.list", read_args("st")),
        ("files.read", read_args("st/corral.db")),
        ("files.download", read_args("st/corral.db")),
        ("files.stat", read_args("st/corral.db")),
        ("files.write", write_args("st/corral.db-shm", "x")),
        (
            "files.write",
            write_args("cfg", "rules: [{allow: [commands.run]}]\n"),
        ),
        ("files.read", read_args("cfg")),
        ("files.delete", read_args("st/corral.db")),
    ] {
        let r = call(&e, op, args).await;
        assert!(refused(&r, codes::POLICY_PATH_DENIED), "{op}: {r:?}");
    }
    assert_eq!(std::fs::read_to_string(&config)?, "version: 1\n");
    assert!(!ws.path("state/corral.db-shm").exists());
    Ok(())
}

#[tokio::test]
async fn a_deny_pattern_holds_for_where_a_symlink_leads() -> TestResult {
    // issue 11 item 9: deny patterns bypassed through a symlink.
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    // A symlink to `.env`.
    symlink("../.env", ws.path("data/link-to-env"))?;
    let r = call(&e, "files.read", read_args("data/link-to-env")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    let msg = r.err().map(|e| e.message).unwrap_or_default();
    assert!(msg.contains("**/.env"), "the pattern is named: {msg}");
    // A symlink to a directory holding `.env`.
    symlink("..", ws.path("data/up"))?;
    let r = call(&e, "files.read", read_args("data/up/.env")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    // A chain of symlinks.
    symlink("link-to-env", ws.path("data/chain1"))?;
    symlink("chain1", ws.path("data/chain2"))?;
    for op in ["files.read", "files.download", "files.stat"] {
        let r = call(&e, op, read_args("data/chain2")).await;
        assert!(refused(&r, codes::POLICY_PATH_DENIED), "{op}: {r:?}");
    }
    let r = call(&e, "files.write", write_args("data/chain2", "SECRET=2\n")).await;
    assert!(refused(&r, codes::POLICY_PATH_DENIED), "{r:?}");
    assert_eq!(std::fs::read_to_string(ws.path(".env"))?, "SECRET=1\n");
    // The near miss: a symlink to an allowed file still works.
    symlink("../ok.txt", ws.path("data/link-to-ok"))?;
    let r = call(&e, "files.read", read_args("data/link-to-ok")).await;
    assert!(r.is_ok(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn a_deny_rule_holds_for_where_a_symlink_leads() -> TestResult {
    // issue 11 item 9: a path-scoped deny rule, reached through a symlink.
    let ws = Ws::new()?;
    std::fs::create_dir_all(ws.path("private"))?;
    std::fs::write(ws.path("private/plan.txt"), "plan")?;
    let private = ws.path("private").to_string_lossy().into_owned();
    let e = ws.engine(&[], Some(&private))?;
    symlink("../private/plan.txt", ws.path("data/plan"))?;
    let r = call(&e, "files.read", read_args("data/plan")).await;
    assert!(refused(&r, codes::POLICY_DENIED), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn a_path_longer_than_the_kernel_takes_is_the_callers_error() -> TestResult {
    // issue 11, wrong errors: a 6 KB path gave `500 files.io` "File name too long".
    let ws = Ws::new()?;
    let e = ws.engine(&[], None)?;
    let long = "a/".repeat(3000);
    let r = call(&e, "files.read", read_args(&long)).await;
    let err = r.err();
    assert_eq!(
        err.as_ref().map(|e| (e.code, e.status())),
        Some((codes::ARGS_PATH_TOO_LONG, 400))
    );
    assert!(err.map(|e| e.message).unwrap_or_default().contains("4095"));
    let name = "n".repeat(300);
    let r = call(&e, "files.write", write_args(&name, "x")).await;
    let err = r.err();
    assert_eq!(
        err.as_ref().map(|e| (e.code, e.status())),
        Some((codes::ARGS_PATH_TOO_LONG, 400))
    );
    assert!(err.map(|e| e.message).unwrap_or_default().contains("255"));
    Ok(())
}
