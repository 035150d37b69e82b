//! Protected locations: what no agent may create, change, rename or delete, through any op or
//! any sandboxed program (issue 11: `.git`, corral's state, its config and key files).
//!
//! Three kinds of protection, all matched against an absolute, normalized path that the caller
//! has already **resolved** (no symlink left in it): a path component with a protected name
//! (`.git` and `.corral` always), a protected absolute path and everything beneath it (the state
//! directory, the config file, key and token files), and a glob from the config's `protected:`
//! list (a pattern without `/` matches a name at any depth, and every pattern also covers what
//! lies beneath a match, as deny globs do).

use globset::GlobSet;

use crate::error::PolicyError;
use crate::scope::path::{compile_deny_globs, normalize};

/// Names protected wherever they appear as a path component, in every deployment.
pub const ALWAYS_PROTECTED_NAMES: &[&str] = &[".git", ".corral"];

/// Whether a file named `HEAD` with this content (its first bytes) would make its directory a
/// git directory: git takes a directory holding a valid `HEAD`, `objects/` and `refs/` for a
/// (bare) repository and runs what its `config` says (`core.fsmonitor`, hooks), without any
/// `.git` in the path. A valid `HEAD` is `ref: refs/...` or an object id (40 or 64 hex digits).
/// Without one, git does not take the directory for a repository, so refusing such a `HEAD`
/// (anywhere, by any op or program) keeps embedded repositories out (issue 11 item 2).
pub fn looks_like_git_head(content: &[u8]) -> bool {
    let text = content.trim_ascii_start();
    if text.starts_with(b"ref:") {
        return true;
    }
    let hex = text.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    hex >= 40
}

/// The file name git reads a repository's current ref from.
pub const GIT_HEAD: &str = "HEAD";

/// What is protected, as written (before compiling the globs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectedSpec {
    /// Extra path components protected at any depth (the always-protected names are added by
    /// [`Protected::compile`]).
    pub names: Vec<String>,
    /// Absolute, resolved host paths protected with everything beneath them.
    pub paths: Vec<String>,
    /// The config's `protected:` globs.
    pub globs: Vec<String>,
}

/// What a call does at a path, for [`Protected::hit_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads, lists, stats or downloads.
    Read,
    /// Creates, writes, appends, renames or deletes.
    Change,
}

/// Why a path is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtectedHit {
    /// A component of the path has a protected name.
    Name(String),
    /// The path is, or lies under, a protected path.
    Path(String),
    /// The path matches a `protected:` glob.
    Glob,
}

impl ProtectedHit {
    /// A phrase for error messages: "`.git` is a protected name", ...
    pub fn describe(&self) -> String {
        match self {
            ProtectedHit::Name(n) => format!("`{n}` is a protected name"),
            ProtectedHit::Path(p) => format!("`{p}` is protected (corral's own state or config)"),
            ProtectedHit::Glob => "it matches the config's `protected:` list".to_owned(),
        }
    }
}

/// The compiled protection. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Protected {
    // INVARIANT (always-names): `names` holds every entry of ALWAYS_PROTECTED_NAMES.
    names: Vec<String>,
    // INVARIANT (normalized-paths): every entry is the normalized components of an absolute path.
    paths: Vec<Vec<String>>,
    globs: GlobSet,
    spec: ProtectedSpec,
}

impl Default for Protected {
    fn default() -> Self {
        // An empty glob list always compiles.
        Self::compile(ProtectedSpec::default()).unwrap_or_else(|_| Protected {
            names: ALWAYS_PROTECTED_NAMES
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            paths: Vec::new(),
            globs: GlobSet::empty(),
            spec: ProtectedSpec::default(),
        })
    }
}

impl Protected {
    /// Compiles `spec`. Paths that are not absolute, names with a `/`, and invalid globs are
    /// refused.
    pub fn compile(spec: ProtectedSpec) -> Result<Self, PolicyError> {
        let mut names: Vec<String> = ALWAYS_PROTECTED_NAMES
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        for n in &spec.names {
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                return Err(PolicyError::InvalidScope {
                    what: format!("protected name `{n}` is not a file name"),
                    fix: "write a single name such as `.env`, or a glob in `protected:`".into(),
                });
            }
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        let mut paths = Vec::with_capacity(spec.paths.len());
        for p in &spec.paths {
            let parts = match normalize(p) {
                Some(parts) if p.starts_with('/') && !parts.is_empty() => parts,
                _ => {
                    return Err(PolicyError::InvalidScope {
                        what: format!("protected path `{p}` is not an absolute path below `/`"),
                        fix: "give the absolute, resolved path".into(),
                    });
                }
            };
            paths.push(parts.into_iter().map(str::to_owned).collect());
        }
        let globs = compile_deny_globs(&spec.globs)?;
        Ok(Protected {
            names,
            paths,
            globs,
            spec,
        })
    }

    /// What was compiled.
    pub fn spec(&self) -> &ProtectedSpec {
        &self.spec
    }

    /// The protected names, the always-protected ones first.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Why the absolute, resolved path `abs` is protected, or `None`. A path that is not
    /// absolute or cannot be normalized is reported as protected (fail closed).
    pub fn hit(&self, abs: &str) -> Option<ProtectedHit> {
        let Some(parts) = normalize(abs).filter(|_| abs.starts_with('/')) else {
            return Some(ProtectedHit::Path(abs.to_owned()));
        };
        if let Some(n) = parts.iter().find(|c| self.names.iter().any(|n| n == *c)) {
            return Some(ProtectedHit::Name((*n).to_owned()));
        }
        if let Some(hit) = self.path_hit(&parts) {
            return Some(hit);
        }
        let joined = format!("/{}", parts.join("/"));
        if !self.globs.is_empty() && self.globs.is_match(&joined) {
            return Some(ProtectedHit::Glob);
        }
        None
    }

    /// Why the absolute, resolved path `abs` may not be reached with `access`: a change is
    /// refused at every protected location; a read only at corral's own files (the protected
    /// paths: state directory, config, key and token files). Reading `.git` is the policy's
    /// business; reading corral's database or keys never is. Fails closed like [`Self::hit`].
    pub fn hit_for(&self, abs: &str, access: Access) -> Option<ProtectedHit> {
        match access {
            Access::Change => self.hit(abs),
            Access::Read => {
                let Some(parts) = normalize(abs).filter(|_| abs.starts_with('/')) else {
                    return Some(ProtectedHit::Path(abs.to_owned()));
                };
                self.path_hit(&parts)
            }
        }
    }

    fn path_hit(&self, parts: &[&str]) -> Option<ProtectedHit> {
        self.paths
            .iter()
            .find(|root| root.len() <= parts.len() && root.iter().zip(parts).all(|(a, b)| a == b))
            .map(|p| ProtectedHit::Path(format!("/{}", p.join("/"))))
    }

    /// Adds an absolute path (protected with what lies beneath it). A path that is not absolute,
    /// or is `/`, cannot be checked against: it protects everything (fails closed), where
    /// [`Self::compile`] refuses it.
    pub fn add_path(&mut self, p: &str) {
        let parts: Vec<String> = normalize(p)
            .filter(|_| p.starts_with('/'))
            .map(|v| v.into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
        if !self.paths.contains(&parts) {
            self.paths.push(parts);
            self.spec.paths.push(p.to_owned());
        }
    }

    /// Everything `self` or `other` protects. Globs that no longer compile together (they each
    /// compiled alone) protect everything (fails closed).
    pub fn union(mut self, other: &Protected) -> Self {
        for n in &other.names {
            if !self.names.contains(n) {
                self.names.push(n.clone());
                self.spec.names.push(n.clone());
            }
        }
        for p in &other.spec.paths {
            self.add_path(p);
        }
        if !other.spec.globs.is_empty() {
            self.spec.globs.extend(other.spec.globs.iter().cloned());
            match compile_deny_globs(&self.spec.globs) {
                Ok(g) => self.globs = g,
                Err(_) => self.paths.push(Vec::new()),
            }
        }
        self
    }

    /// Whether a protected path lies strictly beneath the absolute, resolved directory `abs`
    /// (so deleting or renaming `abs` would take it along). Protected names and globs beneath a
    /// directory are found by walking it; this covers the protected paths, which may not exist
    /// yet.
    pub fn path_beneath(&self, abs: &str) -> Option<String> {
        let parts = normalize(abs).filter(|_| abs.starts_with('/'))?;
        self.paths
            .iter()
            .find(|p| p.len() > parts.len() && p.iter().zip(&parts).all(|(a, b)| a == b))
            .map(|p| format!("/{}", p.join("/")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles the lists (a spec that does not compile gives the default, so the assertions
    /// below fail on it).
    fn protected(names: &[&str], paths: &[&str], globs: &[&str]) -> Protected {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
        Protected::compile(ProtectedSpec {
            names: own(names),
            paths: own(paths),
            globs: own(globs),
        })
        .ok()
        .unwrap_or_default()
    }

    #[test]
    fn git_and_corral_are_protected_at_any_depth_by_default() {
        let p = Protected::default();
        assert_eq!(
            p.hit("/ws/.git/config"),
            Some(ProtectedHit::Name(".git".into()))
        );
        assert_eq!(
            p.hit("/ws/vendor/lib/.git"),
            Some(ProtectedHit::Name(".git".into()))
        );
        assert_eq!(
            p.hit("/ws/.corral/corral.db-shm"),
            Some(ProtectedHit::Name(".corral".into()))
        );
        assert_eq!(p.hit("/ws/.gitignore"), None);
        assert_eq!(p.hit("/ws/src/git"), None);
    }

    #[test]
    fn paths_protect_themselves_and_what_is_beneath_them() {
        let p = protected(&[], &["/srv/corral.yaml", "/srv/state"], &[]);
        assert!(p.hit("/srv/corral.yaml").is_some());
        assert!(p.hit("/srv/state/corral.db").is_some());
        assert!(p.hit("/srv/./state/../state/x").is_some());
        assert_eq!(p.hit("/srv/corral.yaml.bak"), None);
        assert_eq!(p.path_beneath("/srv"), Some("/srv/corral.yaml".into()));
        assert_eq!(p.path_beneath("/srv/state"), None);
        assert_eq!(p.path_beneath("/other"), None);
    }

    #[test]
    fn globs_match_names_at_any_depth_and_what_lies_beneath() {
        let p = protected(&[], &[], &["*.pem", "/ws/secrets"]);
        assert_eq!(p.hit("/ws/a/b/key.pem"), Some(ProtectedHit::Glob));
        assert_eq!(p.hit("/ws/secrets/x"), Some(ProtectedHit::Glob));
        assert_eq!(p.hit("/ws/a/b/key.txt"), None);
    }

    #[test]
    fn reads_are_refused_only_at_corrals_own_files() {
        let p = protected(&[], &["/ws/.corral", "/srv/corral.yaml"], &["*.pem"]);
        assert_eq!(p.hit_for("/ws/.git/config", Access::Read), None);
        assert_eq!(p.hit_for("/ws/a/key.pem", Access::Read), None);
        assert_eq!(
            p.hit_for("/ws/.corral/corral.db", Access::Read),
            Some(ProtectedHit::Path("/ws/.corral".into()))
        );
        assert!(p.hit_for("/srv/corral.yaml", Access::Read).is_some());
        assert!(p.hit_for("/ws/.git/config", Access::Change).is_some());
        assert!(p.hit_for("/ws/a/key.pem", Access::Change).is_some());
        assert!(p.hit_for("relative", Access::Read).is_some());
    }

    #[test]
    fn added_and_united_paths_are_protected_and_a_bad_one_protects_everything() {
        let mut p = Protected::default();
        p.add_path("/srv/state");
        assert!(p.hit_for("/srv/state/x", Access::Read).is_some());
        let q = protected(&["secrets"], &["/etc/corral.yaml"], &["*.pem"]);
        let u = p.clone().union(&q);
        assert!(u.hit("/srv/state/x").is_some());
        assert!(u.hit("/etc/corral.yaml").is_some());
        assert!(u.hit("/ws/secrets/a").is_some());
        assert!(u.hit("/ws/k.pem").is_some());
        assert_eq!(u.hit("/ws/k.txt"), None);
        p.add_path("not/absolute");
        assert!(p.hit_for("/anything", Access::Read).is_some());
    }

    #[test]
    fn a_git_head_is_recognised_by_its_content() {
        assert!(looks_like_git_head(b"ref: refs/heads/main\n"));
        assert!(looks_like_git_head(b"  ref:refs/heads/x"));
        assert!(looks_like_git_head(
            b"0123456789abcdef0123456789abcdef01234567\n"
        ));
        assert!(!looks_like_git_head(b"HEAD of the class\n"));
        assert!(!looks_like_git_head(b"deadbeef\n"));
        assert!(!looks_like_git_head(b""));
    }

    #[test]
    fn a_relative_path_counts_as_protected() {
        assert!(Protected::default().hit("ws/x").is_some());
    }

    #[test]
    fn bad_entries_are_refused() {
        let bad = |names: &[&str], paths: &[&str], globs: &[&str]| {
            let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
            Protected::compile(ProtectedSpec {
                names: own(names),
                paths: own(paths),
                globs: own(globs),
            })
            .is_err()
        };
        assert!(bad(&["a/b"], &[], &[]));
        assert!(bad(&[], &["relative"], &[]));
        assert!(bad(&[], &["/"], &[]));
        assert!(bad(&[], &[], &["[unclosed"]));
    }
}
