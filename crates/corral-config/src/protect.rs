//! Corral's own files (state directory, config file, key files, audit file, SQLite database),
//! resolved, and the load check that none of them lies inside a root that a rule lets callers
//! write (issue 11 items 3 and 4: an agent that can write corral's config rewrites its own
//! policy; one that can write the state directory reads the audit and crashes the store).

use std::path::{Component, Path, PathBuf};

use corral_policy::{Catalog, ParamKind, Policy, RuleEffect, codes};

use crate::build::absolutize;
use crate::diag::Diagnostic;
use crate::model::{AuditSink, Config};
use crate::yaml::Span;

/// One of corral's own files or directories, which no op may read or change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnFile {
    /// What it is, in words (`the state directory`, `the config file`, ...).
    pub what: &'static str,
    /// The config key that names it (for diagnostics).
    pub key: &'static str,
    /// Where in the config it is named, if it is.
    pub span: Option<Span>,
    /// The absolute path, as configured (lexically normalized).
    pub path: PathBuf,
    /// The same path with every symlink in it resolved (see [`resolve_path`]).
    pub resolved: PathBuf,
}

impl OwnFile {
    fn new(what: &'static str, key: &'static str, span: Option<Span>, path: PathBuf) -> Self {
        let resolved = resolve_path(&path);
        Self {
            what,
            key,
            span,
            path,
            resolved,
        }
    }

    /// Both forms, the configured one first (once when they are the same).
    pub fn forms(&self) -> Vec<&Path> {
        if self.path == self.resolved {
            vec![&self.path]
        } else {
            vec![&self.path, &self.resolved]
        }
    }
}

/// `p` (absolute) with every symlink resolved: the longest prefix that exists is
/// canonicalized and the rest appended as written. A path that does not exist yet is resolved
/// as far as it goes, so it still compares with the real paths the file ops see.
pub fn resolve_path(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return out;
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Corral's own files for a config: the state directory, the config file (when loaded from
/// one), the JWT public key file, an audit file and a SQLite database named by `storage.url`.
pub(crate) fn own_files(
    c: &Config,
    base_dir: &Path,
    state_dir: &Path,
    config_file: Option<&Path>,
) -> Vec<OwnFile> {
    let mut v = vec![OwnFile::new(
        "the state directory",
        "state_dir",
        c.state_dir.as_ref().map(|s| s.span),
        state_dir.to_path_buf(),
    )];
    if let Some(f) = config_file {
        v.push(OwnFile::new("the config file", "", None, f.to_path_buf()));
    }
    if let Some(k) = c
        .auth
        .jwt
        .as_ref()
        .and_then(|j| j.rs256_public_key_file.as_ref())
    {
        v.push(OwnFile::new(
            "the JWT public key file",
            "auth.jwt.rs256_public_key_file",
            Some(k.span),
            absolutize(base_dir, &k.value),
        ));
    }
    if let AuditSink::File(p) = &c.audit.sink {
        // Relative to the state directory's parent, as the server opens it.
        let anchor = state_dir.parent().unwrap_or(state_dir);
        v.push(OwnFile::new(
            "the audit file",
            "audit.sink",
            None,
            absolutize(anchor, p),
        ));
    }
    if let Some(url) = &c.storage.url
        && let Some(rest) = url.strip_prefix("sqlite://")
    {
        let file = rest.split('?').next().unwrap_or(rest);
        if !file.is_empty() && file != ":memory:" {
            let anchor = state_dir.parent().unwrap_or(state_dir);
            v.push(OwnFile::new(
                "the SQLite database",
                "storage.url",
                None,
                absolutize(anchor, file),
            ));
        }
    }
    v
}

/// A root callers may write, and the rule (or `mcp_servers` entry) that lets them.
#[derive(Debug, Clone)]
struct Writable {
    root: String,
    by: String,
}

/// The roots some caller can write: the path-scope roots of allow rules that mount an op
/// changing files or running a command (unless `readonly`), a command scope's cwd (a command
/// writes there), an agent scope's workdir unless it is `read-only` (the agent writes there),
/// and `mcp_servers` write paths.
fn writable_roots(
    policy: &Policy,
    catalog: &Catalog,
    c: &Config,
    base_dir: &Path,
) -> Vec<Writable> {
    let mut out = Vec::new();
    for r in policy
        .rules
        .iter()
        .filter(|r| r.effect == RuleEffect::Allow)
    {
        let ops: Vec<_> = catalog.iter().filter(|op| r.mounts(op)).collect();
        if let Some(a) = &r.agents
            && a.permissions().writes()
            && ops.iter().any(|op| op.agent_scoped)
        {
            out.push(Writable {
                root: a.spec().workdir.clone(),
                by: format!("rule `{}` (its agents' workdir)", r.name),
            });
        }
        let changes_files = ops.iter().any(|op| {
            op.effective_effects().mutates_files()
                && op
                    .params
                    .iter()
                    .any(|p| matches!(p.kind, ParamKind::Path { root: None }))
        });
        let runs = ops.iter().any(|op| {
            op.params
                .iter()
                .any(|p| matches!(p.kind, ParamKind::Argv | ParamKind::CommandLine))
        });
        let readonly = r.paths.as_ref().is_some_and(|p| p.spec().readonly);
        if readonly || !(changes_files || runs) {
            continue;
        }
        if let Some(p) = &r.paths {
            for root in &p.spec().roots {
                out.push(Writable {
                    root: root.clone(),
                    by: format!("rule `{}`", r.name),
                });
            }
        }
        if runs && let Some(cwd) = r.commands.as_ref().and_then(|c| c.spec().cwd.clone()) {
            out.push(Writable {
                root: cwd,
                by: format!("rule `{}` (its commands' cwd)", r.name),
            });
        }
    }
    for s in &c.mcp_servers {
        for w in &s.write_paths {
            out.push(Writable {
                root: absolutize(base_dir, &w.value)
                    .to_string_lossy()
                    .into_owned(),
                by: format!("`mcp_servers.{}.write_paths`", s.name.value),
            });
        }
    }
    // A custom op's program writes its write paths (or its cwd) and its writable params' roots.
    let root = c.root.as_ref().map(|r| r.value.as_str());
    for op in &c.custom {
        let params = op
            .params
            .iter()
            .filter(|p| p.writable)
            .filter_map(|p| match &p.kind {
                corral_policy::ParamKind::Path { root: Some(r) } => Some(r.clone()),
                _ => None,
            });
        for w in op.declared_write_paths(root).into_iter().chain(params) {
            out.push(Writable {
                root: absolutize(base_dir, &w).to_string_lossy().into_owned(),
                by: format!("custom op `{}`", op.id.value),
            });
        }
    }
    out
}

fn parts(p: &str) -> Vec<&str> {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

/// Whether one of `a` and `b` lies inside the other (`{principal.id}` matches any component).
fn nested(a: &str, b: &str) -> bool {
    let (a, b) = (parts(a), parts(b));
    let n = a.len().min(b.len());
    a[..n]
        .iter()
        .zip(&b[..n])
        .all(|(x, y)| x == y || *x == "{principal.id}" || *y == "{principal.id}")
}

/// An error for each of corral's own files that lies inside (or holds) a root some caller
/// can write, compared as configured and resolved.
pub(crate) fn check_writable(
    own: &[OwnFile],
    policy: &Policy,
    catalog: &Catalog,
    c: &Config,
    base_dir: &Path,
) -> Vec<Diagnostic> {
    let roots = writable_roots(policy, catalog, c, base_dir);
    let mut out = Vec::new();
    for f in own {
        let hit = roots.iter().find_map(|w| {
            let root_forms = [PathBuf::from(&w.root), resolve_path(Path::new(&w.root))];
            f.forms().into_iter().find_map(|fp| {
                root_forms
                    .iter()
                    .find(|r| {
                        is_absolute_plain(r) && nested(&fp.to_string_lossy(), &r.to_string_lossy())
                    })
                    .map(|r| (w, r.clone(), fp))
            })
        });
        if let Some((w, root, fp)) = hit {
            out.push(
                Diagnostic::error(
                    codes::CONFIG_PROTECTED_WRITABLE,
                    format!(
                        "{} `{}` lies inside `{}`, which {} lets callers write; an agent could \
                         change corral's own {}",
                        f.what,
                        fp.display(),
                        root.display(),
                        w.by,
                        if f.what == "the config file" || f.what.contains("key") {
                            "policy"
                        } else {
                            "state"
                        }
                    ),
                    f.key,
                    f.span,
                )
                .with_fix(match f.key {
                    "state_dir" => "set `state_dir:` to a directory outside every writable root, or make that root read-only (`readonly: true`)".to_owned(),
                    "" => "keep corral.yaml outside every writable root (e.g. beside the workspace, not in it), or make that root read-only (`readonly: true`)".to_owned(),
                    k => format!("move the file named by `{k}` outside every writable root, or make that root read-only (`readonly: true`)"),
                }),
            );
        }
    }
    out
}

fn is_absolute_plain(p: &Path) -> bool {
    p.is_absolute() && !p.components().any(|c| matches!(c, Component::ParentDir))
}

/// [`OwnFile`]s of `loaded` resolved again now (the state directory may have been created, or a
/// symlink changed, since the config was loaded).
pub fn resolved_again(loaded: &crate::Loaded) -> Vec<OwnFile> {
    loaded
        .own_files
        .iter()
        .map(|f| OwnFile::new(f.what, f.key, f.span, f.path.clone()))
        .collect()
}

/// The load check again, on paths resolved now: an error for each of corral's own files that
/// lies inside a root some caller can write. The server runs it before it opens the store.
pub fn writable_conflicts(loaded: &crate::Loaded) -> Vec<Diagnostic> {
    check_writable(
        &resolved_again(loaded),
        &loaded.policy,
        &loaded.catalog,
        &loaded.config,
        &loaded.base_dir,
    )
}
