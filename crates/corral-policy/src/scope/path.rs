//! `PathScope`: the directories an op may touch, matched by path components.

use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::codes;
use crate::error::PolicyError;
use crate::principal::Principal;

/// Locations no scope ever reaches, whatever its roots.
pub const ALWAYS_DENIED: &[&str] = &["/proc", "/sys", "/dev"];

/// Secret-bearing names the presets deny by default.
pub const DEFAULT_SECRET_DENY: &[&str] = &[".env", ".env.*", ".ssh", "*.pem", "*.key", "id_rsa*"];

/// What the op does when it meets a symlink while opening a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SymlinkMode {
    /// Symlinks are followed only while they stay beneath the root (the default).
    #[default]
    Within,
    /// Any symlink is refused.
    Deny,
    /// Symlinks are followed anywhere: needs `unsafe: true` and is a lint error.
    Follow,
}

impl SymlinkMode {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            SymlinkMode::Within => "within",
            SymlinkMode::Deny => "deny",
            SymlinkMode::Follow => "follow",
        }
    }

    /// Parses a config name.
    pub fn parse(s: &str) -> Option<Self> {
        [SymlinkMode::Within, SymlinkMode::Deny, SymlinkMode::Follow]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// How a path scope is written: the input of `PathScope::compile`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PathScopeSpec {
    /// Root directories: absolute, never `/`, no globs; `{principal.id}` may stand for a whole
    /// component.
    pub roots: Vec<String>,
    /// Glob patterns that are refused even under a root. A pattern without `/` matches a name at
    /// any depth; every pattern also covers everything beneath what it matches.
    pub deny: Vec<String>,
    /// Refuse ops that write or delete.
    pub readonly: bool,
    /// Symlink handling when the op opens the path.
    pub symlinks: SymlinkMode,
    /// Largest file the op may read or write.
    pub max_bytes: Option<u64>,
    /// Permits `/` as a root and `symlinks: follow`. A lint error, always.
    pub unsafe_: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RootPart {
    Lit(String),
    PrincipalId,
}

/// A compiled path scope. Cheap to clone (a grant carries the scopes whose deny patterns the
/// op re-checks on the path it really opened).
#[derive(Debug, Clone)]
pub struct PathScope {
    spec: Arc<PathScopeSpec>,
    // INVARIANT (normalized-roots): every root is absolute and free of `.`, `..` and globs; it
    // is `/` (no parts) only when `spec.unsafe_` is set.
    roots: Arc<[Vec<RootPart>]>,
    deny: Arc<GlobSet>,
}

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    /// Empty, contains NUL, or relative with no root to anchor it.
    Invalid,
    /// Not under any root.
    OutsideRoots,
    /// Under a root but matches a deny pattern.
    Denied,
}

impl PathRefusal {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            PathRefusal::Invalid => codes::POLICY_PATH_INVALID,
            PathRefusal::OutsideRoots => codes::POLICY_PATH_OUTSIDE_SCOPE,
            PathRefusal::Denied => codes::POLICY_PATH_DENIED,
        }
    }
}

/// A path that a scope accepted: a root and a relative path beneath it with no `.` or `..`.
/// Only a scope can make one, so an op handler never sees a raw path argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailedPath {
    // INVARIANT (jailed): `root` is a root of the scope that made it (templates filled in) and
    // `relative` has no empty, `.` or `..` component.
    root: String,
    relative: String,
}

impl JailedPath {
    /// The root the path lies under.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The path relative to the root (`""` for the root itself). Open it with
    /// `RESOLVE_BENEATH` from the root so a later symlink swap cannot escape.
    pub fn relative(&self) -> &str {
        &self.relative
    }

    /// The absolute path.
    pub fn absolute(&self) -> String {
        match (self.root.as_str(), self.relative.is_empty()) {
            (root, true) => root.to_owned(),
            ("/", false) => format!("/{}", self.relative),
            (root, false) => format!("{root}/{}", self.relative),
        }
    }
}

/// An absolute path split into normalized components, with its joined form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormPath<'a> {
    /// Components: no empty, `.` or `..` part.
    pub parts: Vec<&'a str>,
    /// `/` followed by the parts joined with `/`.
    pub absolute: String,
}

impl<'a> NormPath<'a> {
    /// Normalizes an absolute path; `None` for an empty path, a relative one, or one with NUL.
    pub fn new(raw: &'a str) -> Option<Self> {
        if !raw.starts_with('/') {
            return None;
        }
        normalize(raw).map(Self::from_parts)
    }

    /// Builds from components that are already normalized.
    pub(crate) fn from_parts_pub(parts: Vec<&'a str>) -> Self {
        Self::from_parts(parts)
    }

    fn from_parts(parts: Vec<&'a str>) -> Self {
        let mut absolute = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
        for p in &parts {
            absolute.push('/');
            absolute.push_str(p);
        }
        if absolute.is_empty() {
            absolute.push('/');
        }
        Self { parts, absolute }
    }

    /// The jailed form, given the root length `admit` returned.
    pub fn jail(&self, root_len: usize) -> JailedPath {
        let (root_parts, relative) = self.parts.split_at(root_len.min(self.parts.len()));
        // `/` followed by the root's parts joined with `/`, built in one allocation.
        let mut root =
            String::with_capacity(root_parts.iter().map(|p| p.len() + 1).sum::<usize>().max(1));
        for p in root_parts {
            root.push('/');
            root.push_str(p);
        }
        if root.is_empty() {
            root.push('/');
        }
        JailedPath {
            root,
            relative: relative.join("/"),
        }
    }

    /// Whether this path is `other` or lies beneath it.
    pub fn starts_with(&self, other: &NormPath<'_>) -> bool {
        other.parts.len() <= self.parts.len()
            && other.parts.iter().zip(&self.parts).all(|(a, b)| a == b)
    }
}

/// Splits a path into normalized components: empty and `.` parts dropped, `..` pops (never above
/// `/`). Returns `None` for an empty path or one holding NUL.
pub fn normalize(raw: &str) -> Option<Vec<&str>> {
    if raw.is_empty() || raw.contains('\0') {
        return None;
    }
    let mut parts = Vec::with_capacity(8);
    push_normalized(&mut parts, raw);
    Some(parts)
}

fn push_normalized<'a>(parts: &mut Vec<&'a str>, raw: &'a str) {
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
}

/// Whether `parts` lies in one of the always-denied trees (`/proc`, `/sys`, `/dev`) or under
/// one of `extra` (given as normalized absolute paths).
pub fn is_protected(parts: &[&str], extra: &[Vec<String>]) -> bool {
    ALWAYS_DENIED
        .iter()
        .any(|p| parts.first() == p.strip_prefix('/').as_ref())
        || extra
            .iter()
            .any(|root| root.len() <= parts.len() && root.iter().zip(parts).all(|(a, b)| a == b))
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', ']'])
}

fn invalid(what: String, fix: &str) -> PolicyError {
    PolicyError::InvalidScope {
        what,
        fix: fix.to_owned(),
    }
}

/// Compiles deny globs: a pattern without `/` matches a name at any depth, and every pattern
/// also covers what lies beneath a match.
pub(crate) fn compile_deny_globs(patterns: &[String]) -> Result<GlobSet, PolicyError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let base = if p.starts_with('/') || p.starts_with("**") {
            p.trim_end_matches('/').to_owned()
        } else {
            format!("**/{}", p.trim_end_matches('/'))
        };
        for g in [base.clone(), format!("{base}/**")] {
            let glob = GlobBuilder::new(&g)
                .literal_separator(true)
                .build()
                .map_err(|e| {
                    invalid(
                        format!("deny pattern `{p}` is not a valid glob: {}", e.kind()),
                        "write a glob such as `**/.env` or `*.pem`",
                    )
                })?;
            b.add(glob);
        }
    }
    b.build().map_err(|e| {
        invalid(
            format!("deny patterns cannot be compiled: {e}"),
            "simplify them",
        )
    })
}

impl PathScope {
    /// Validates and compiles a path scope.
    pub fn compile(spec: PathScopeSpec) -> Result<Self, PolicyError> {
        if spec.roots.is_empty() {
            return Err(invalid(
                "a path scope needs at least one root".to_owned(),
                "add `roots: [/workspace]`",
            ));
        }
        if spec.symlinks == SymlinkMode::Follow && !spec.unsafe_ {
            return Err(PolicyError::UnsafeRequired {
                what: "`symlinks: follow`".to_owned(),
            });
        }
        let mut roots = Vec::with_capacity(spec.roots.len());
        for r in &spec.roots {
            if !r.starts_with('/') {
                return Err(invalid(
                    format!("root `{r}` is not an absolute path"),
                    "write the root as an absolute directory, e.g. `/workspace`",
                ));
            }
            if has_glob(r) {
                return Err(invalid(
                    format!("root `{r}` contains a glob"),
                    "roots are plain directories; put patterns in `deny:`",
                ));
            }
            if r.split('/').any(|c| c == "..") || r.contains('\0') {
                return Err(invalid(
                    format!("root `{r}` contains `..`"),
                    "write the root without `..`",
                ));
            }
            let mut parts = Vec::new();
            for c in r.split('/').filter(|c| !c.is_empty() && *c != ".") {
                if c == "{principal.id}" {
                    parts.push(RootPart::PrincipalId);
                } else if c.contains(['{', '}']) {
                    return Err(invalid(
                        format!("root `{r}` has a template other than `{{principal.id}}`"),
                        "the only template is a whole component `{principal.id}`",
                    ));
                } else {
                    parts.push(RootPart::Lit(c.to_owned()));
                }
            }
            if parts.is_empty() && !spec.unsafe_ {
                return Err(PolicyError::UnsafeRequired {
                    what: "the root `/`".to_owned(),
                });
            }
            if let Some(RootPart::Lit(first)) = parts.first()
                && ALWAYS_DENIED
                    .iter()
                    .any(|d| d.strip_prefix('/') == Some(first))
            {
                return Err(invalid(
                    format!("root `{r}` is inside /proc, /sys or /dev"),
                    "those trees are always denied; pick another directory",
                ));
            }
            roots.push(parts);
        }
        let deny = compile_deny_globs(&spec.deny)?;
        Ok(Self {
            spec: Arc::new(spec),
            roots: Arc::from(roots),
            deny: Arc::new(deny),
        })
    }

    /// Compiles the path scope of a deny rule: `/` is a valid root there (deny everything), and
    /// roots may be left out when deny patterns are given (then only the patterns match).
    pub fn compile_deny(mut spec: PathScopeSpec) -> Result<Self, PolicyError> {
        if spec.roots.is_empty() {
            if spec.deny.is_empty() {
                return Err(invalid(
                    "a deny path scope needs `roots` or `deny` patterns".to_owned(),
                    "add `roots: [/secret]` or `deny: [\"*.pem\"]`",
                ));
            }
            let deny = compile_deny_globs(&spec.deny)?;
            return Ok(Self {
                spec: Arc::new(spec),
                roots: Arc::from(Vec::new()),
                deny: Arc::new(deny),
            });
        }
        spec.unsafe_ = true;
        Self::compile(spec)
    }

    /// The scope as written.
    pub fn spec(&self) -> &PathScopeSpec {
        &self.spec
    }

    /// The roots with `{principal.id}` filled in for `p`; a root whose template cannot be filled
    /// (an id that is not one plain path component) is left out.
    /// The roots with `{principal.id}` filled in for `p`, as absolute paths.
    pub fn roots_for(&self, p: &Principal) -> Vec<String> {
        self.concrete_roots(p)
            .map(|parts| format!("/{}", parts.join("/")))
            .collect()
    }

    fn concrete_roots<'a>(&'a self, p: &'a Principal) -> impl Iterator<Item = Vec<&'a str>> + 'a {
        let id_ok = !p.id.is_empty() && p.id != "." && p.id != ".." && !p.id.contains(['/', '\0']);
        self.roots.iter().filter_map(move |parts| {
            parts
                .iter()
                .map(|part| match part {
                    RootPart::Lit(s) => Some(s.as_str()),
                    RootPart::PrincipalId => id_ok.then_some(p.id.as_str()),
                })
                .collect()
        })
    }

    fn root_matches(root: &[RootPart], path: &[&str], p: &Principal) -> bool {
        root.len() <= path.len()
            && root.iter().zip(path).all(|(r, c)| match r {
                RootPart::Lit(s) => s == c,
                RootPart::PrincipalId => p.id == *c,
            })
    }

    /// Whether the scope has any `{principal.id}` root.
    pub fn is_templated(&self) -> bool {
        self.roots
            .iter()
            .any(|r| r.contains(&RootPart::PrincipalId))
    }

    /// Checks a raw path argument. Relative paths anchor at the first root.
    pub fn check(&self, raw: &str, principal: &Principal) -> Result<JailedPath, PathRefusal> {
        let path = self.anchor(raw, principal)?;
        let root_len = self.admit(&path, principal)?;
        Ok(path.jail(root_len))
    }

    /// Normalizes `raw`, anchoring a relative path at the first root.
    pub fn anchor<'a>(
        &'a self,
        raw: &'a str,
        p: &'a Principal,
    ) -> Result<NormPath<'a>, PathRefusal> {
        if raw.starts_with('/') {
            return NormPath::new(raw).ok_or(PathRefusal::Invalid);
        }
        if raw.is_empty() || raw.contains('\0') {
            return Err(PathRefusal::Invalid);
        }
        let mut parts = self.concrete_roots(p).next().ok_or(PathRefusal::Invalid)?;
        push_normalized(&mut parts, raw);
        Ok(NormPath::from_parts(parts))
    }

    /// Admits a normalized path: returns the length (in components) of the root it lies under.
    pub fn admit(&self, path: &NormPath<'_>, p: &Principal) -> Result<usize, PathRefusal> {
        let root_len = self.root_len(path, p).ok_or(PathRefusal::OutsideRoots)?;
        if !self.spec.deny.is_empty() && self.deny.is_match(&path.absolute) {
            return Err(PathRefusal::Denied);
        }
        Ok(root_len)
    }

    /// The length (in components) of the first root the path lies under, deny patterns aside:
    /// what `admit` returns for a path it admits.
    pub(crate) fn root_len(&self, path: &NormPath<'_>, p: &Principal) -> Option<usize> {
        self.roots
            .iter()
            .find(|r| Self::root_matches(r, &path.parts, p))
            .map(Vec::len)
    }

    /// Whether the path matches one of the scope's deny patterns, wherever it lies (a path
    /// the op resolved is checked with this: the patterns must hold for where a symlink led).
    pub fn denies(&self, path: &NormPath<'_>) -> bool {
        !self.spec.deny.is_empty() && self.deny.is_match(&path.absolute)
    }

    /// For a deny rule: whether the path lies under a root or matches a deny pattern.
    pub fn covers(&self, path: &NormPath<'_>, p: &Principal) -> bool {
        self.roots
            .iter()
            .any(|r| Self::root_matches(r, &path.parts, p))
            || (!self.spec.deny.is_empty() && self.deny.is_match(&path.absolute))
    }

    /// Whether a concrete absolute path (normalized parts) is under one of the roots, for any
    /// principal id when templated. Used by the lint.
    pub fn may_contain(&self, parts: &[&str]) -> bool {
        self.roots.iter().any(|r| {
            r.len() <= parts.len()
                && r.iter().zip(parts).all(|(r, c)| match r {
                    RootPart::Lit(s) => s == c,
                    RootPart::PrincipalId => true,
                })
        })
    }
}
