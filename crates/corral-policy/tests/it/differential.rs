//! The engine against a naive reference evaluator, on random policies and calls.
//!
//! The reference knows nothing of the engine's index, `NormPath`, `PathScope` or globset: it
//! works on a plain model of the rules with straight loops and a hand-written `*` matcher, and
//! spells out the semantics the engine must have:
//!
//! 1. an unknown op, or one no allow rule mounts for the caller, is not mounted (`core.health`
//!    is always mounted);
//! 2. reaching allow rules are tried in order; the first whose clauses all pass wins;
//! 3. any deny rule reaching op and caller that has no scope, or whose path scope covers an
//!    absolute normalized raw path, the winner's resolved path, the cwd or an absolute argv
//!    item, or (for a command) the winner's effective cwd or a relative argv item resolved
//!    from it, denies (an unreadable path argument counts as covered);
//! 4. otherwise a deny glob of any reaching allow rule's path scope that matches the resolved
//!    path (under that scope's roots) denies;
//! 5. otherwise the winner allows, and with no winner the call is not permitted.

use corral_policy::scope::{CommandScope, CommandScopeSpec, PathScope, PathScopeSpec};
use corral_policy::{
    ArgValue, Args, Catalog, Decision, Effect, Engine, OpId, Policy, Principal, PrincipalSelector,
    Request, Rule, Selector, Tier,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Health,
    List,
    Read,
    Write,
    Delete,
    Run,
    Fetch,
    Unknown,
}

/// What a parameter of kind path looks like for an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathParam {
    None,
    Required,
    Optional,
}

/// The scope an allow rule must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    Nothing,
    Paths,
    Commands,
    Urls,
}

const KNOWN_OPS: [Op; 7] = [
    Op::Health,
    Op::List,
    Op::Read,
    Op::Write,
    Op::Delete,
    Op::Run,
    Op::Fetch,
];

impl Op {
    fn id(self) -> &'static str {
        match self {
            Op::Health => "core.health",
            Op::List => "files.list",
            Op::Read => "files.read",
            Op::Write => "files.write",
            Op::Delete => "files.delete",
            Op::Run => "commands.run",
            Op::Fetch => "http.fetch",
            Op::Unknown => "files.nope",
        }
    }

    /// The one effect each op in the model has.
    fn effect(self) -> &'static str {
        match self {
            Op::Health | Op::List | Op::Read | Op::Unknown => "read",
            Op::Write => "write",
            Op::Delete => "delete",
            Op::Run => "exec",
            Op::Fetch => "net",
        }
    }

    fn tier(self) -> &'static str {
        match self.effect() {
            "read" => "read",
            "delete" => "destructive",
            _ => "confirm",
        }
    }

    fn groups(self) -> &'static [&'static str] {
        match self {
            Op::Health => &["core"],
            Op::List | Op::Read => &["file_ops", "file_read"],
            Op::Write | Op::Delete => &["file_ops", "file_write"],
            Op::Run => &["exec"],
            Op::Fetch => &["net"],
            Op::Unknown => &[],
        }
    }

    fn path_param(self) -> PathParam {
        match self {
            Op::List => PathParam::Optional,
            Op::Read | Op::Write | Op::Delete => PathParam::Required,
            Op::Health | Op::Run | Op::Fetch | Op::Unknown => PathParam::None,
        }
    }

    fn needs(self) -> Needs {
        match self {
            Op::List | Op::Read | Op::Write | Op::Delete => Needs::Paths,
            Op::Run => Needs::Commands,
            Op::Fetch => Needs::Urls,
            Op::Health | Op::Unknown => Needs::Nothing,
        }
    }

    fn mutates_files(self) -> bool {
        matches!(self.effect(), "write" | "delete")
    }

    /// No builtin op in the model is explicit-only (none has the admin effect).
    fn explicit_only(self) -> bool {
        false
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sel {
    Exact(Op),
    FilesStar,
    EffectRead,
    EffectWrite,
    TierConfirm,
    All,
    GroupFileOps,
    GroupFileRead,
}

impl Sel {
    fn build(self) -> Selector {
        match self {
            Sel::Exact(op) => match OpId::parse(op.id()) {
                Ok(id) => Selector::Exact(id),
                Err(e) => unreachable!("model op ids are valid: {e}"),
            },
            Sel::FilesStar => Selector::OneLevel("files".to_owned()),
            Sel::EffectRead => Selector::Effect(Effect::Read),
            Sel::EffectWrite => Selector::Effect(Effect::Write),
            Sel::TierConfirm => Selector::Tier(Tier::Confirm),
            Sel::All => Selector::All,
            Sel::GroupFileOps => Selector::Group("file_ops".to_owned()),
            Sel::GroupFileRead => Selector::Group("file_read".to_owned()),
        }
    }

    fn reaches(self, op: Op) -> bool {
        if op == Op::Unknown {
            return false;
        }
        match self {
            Sel::Exact(x) => x == op,
            Sel::FilesStar => match op.id().strip_prefix("files.") {
                Some(rest) => !rest.contains('.'),
                None => false,
            },
            Sel::EffectRead => op.effect() == "read",
            Sel::EffectWrite => op.effect() == "write",
            Sel::TierConfirm => op.tier() == "confirm",
            Sel::All => true,
            Sel::GroupFileOps => op.groups().contains(&"file_ops"),
            Sel::GroupFileRead => op.groups().contains(&"file_read"),
        }
    }

    fn mounts(self, op: Op) -> bool {
        match self {
            Sel::Exact(_) => self.reaches(op),
            _ => !op.explicit_only() && self.reaches(op),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Alice,
    Bob,
    DotDot,
    Slash,
    Anonymous,
}

impl Who {
    fn build(self) -> Principal {
        match self {
            Who::Alice => Principal::new("alice", &["r"]),
            Who::Bob => Principal::new("bob", &[]),
            Who::DotDot => Principal::new("..", &["r"]),
            Who::Slash => Principal::new("a/b", &[]),
            Who::Anonymous => Principal::anonymous(),
        }
    }

    fn id(self) -> &'static str {
        match self {
            Who::Alice => "alice",
            Who::Bob => "bob",
            Who::DotDot => "..",
            Who::Slash => "a/b",
            Who::Anonymous => "anonymous",
        }
    }

    fn has_role_r(self) -> bool {
        matches!(self, Who::Alice | Who::DotDot)
    }

    fn authenticated(self) -> bool {
        self != Who::Anonymous
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PSel {
    IdAlice,
    IdBob,
    IdDotDot,
    RoleR,
    Any,
}

impl PSel {
    fn build(self) -> PrincipalSelector {
        match self {
            PSel::IdAlice => PrincipalSelector::Id("alice".to_owned()),
            PSel::IdBob => PrincipalSelector::Id("bob".to_owned()),
            PSel::IdDotDot => PrincipalSelector::Id("..".to_owned()),
            PSel::RoleR => PrincipalSelector::Role("r".to_owned()),
            PSel::Any => PrincipalSelector::AnyAuthenticated,
        }
    }

    fn matches(self, who: Who) -> bool {
        if !who.authenticated() {
            return false;
        }
        match self {
            PSel::IdAlice => who.id() == "alice",
            PSel::IdBob => who.id() == "bob",
            PSel::IdDotDot => who.id() == "..",
            PSel::RoleR => who.has_role_r(),
            PSel::Any => true,
        }
    }
}

const ROOTS: [&str; 5] = ["/data", "/data/sub", "/data2", "/ws/{principal.id}", "/"];
const DENY_GLOBS: [&str; 5] = ["*.secret", "sub", "/data/sub", "a.*", "/data2/x"];

#[derive(Debug, Clone)]
struct ScopeM {
    roots: Vec<&'static str>,
    deny: Vec<&'static str>,
    readonly: bool,
}

impl ScopeM {
    fn build(&self) -> PathScope {
        let spec = PathScopeSpec {
            roots: self.roots.iter().map(|r| (*r).to_owned()).collect(),
            deny: self.deny.iter().map(|d| (*d).to_owned()).collect(),
            readonly: self.readonly,
            unsafe_: self.roots.contains(&"/"),
            ..PathScopeSpec::default()
        };
        match PathScope::compile(spec) {
            Ok(s) => s,
            Err(e) => unreachable!("model scope {self:?} compiles: {e}"),
        }
    }
}

/// The one command scope of the model: `cat ...` with cwd `/data`.
const COMMAND_CWD: &str = "/data";

fn command_scope() -> CommandScope {
    match CommandScope::compile(CommandScopeSpec {
        allow: vec!["cat ...".to_owned()],
        cwd: Some(COMMAND_CWD.to_owned()),
        ..CommandScopeSpec::default()
    }) {
        Ok(s) => s,
        Err(e) => unreachable!("the model command scope compiles: {e}"),
    }
}

#[derive(Debug, Clone)]
struct RuleM {
    allow: bool,
    sels: Vec<Sel>,
    principals: Vec<PSel>,
    scope: Option<ScopeM>,
    /// Carries the model command scope (allow rules only).
    commands: bool,
}

#[derive(Debug, Clone)]
enum PathArgM {
    Missing,
    NotAString,
    Str(String),
}

#[derive(Debug, Clone)]
struct ReqM {
    op: Op,
    who: Who,
    path: PathArgM,
    argv: Vec<String>,
    cwd: Option<String>,
}

impl ReqM {
    fn args(&self) -> Args {
        let mut a = Args::new();
        match self.op {
            Op::List | Op::Read | Op::Write | Op::Delete => {
                match &self.path {
                    PathArgM::Missing => {}
                    PathArgM::NotAString => a = a.with("path", ArgValue::Int(7)),
                    PathArgM::Str(s) => a = a.str("path", s),
                }
                if self.op == Op::Write {
                    a = a.str("content", "x");
                }
            }
            Op::Run => {
                a = a.with("argv", ArgValue::List(self.argv.clone()));
                if let Some(c) = &self.cwd {
                    a = a.str("cwd", c);
                }
            }
            Op::Fetch => a = a.str("url", "https://example.com/data"),
            Op::Health | Op::Unknown => {}
        }
        a
    }
}

fn build_policy(rules: &[RuleM]) -> Policy {
    let mut p = Policy::new();
    for (i, r) in rules.iter().enumerate() {
        let name = format!("r{i}");
        let sels = r.sels.iter().map(|s| s.build()).collect();
        let mut rule = if r.allow {
            Rule::allow(&name, sels)
        } else {
            Rule::deny(&name, sels)
        };
        rule = rule.principals(r.principals.iter().map(|s| s.build()).collect());
        if let Some(s) = &r.scope {
            rule = rule.paths(s.build());
        }
        if r.commands {
            rule = rule.commands(command_scope());
        }
        p = p.rule(rule);
    }
    p
}

// ---------------------------------------------------------------------------------------------
// The reference evaluator.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The deciding rule (`usize::MAX` for implicit health) and the jailed path (or, for a
    /// command, the jailed cwd), if any.
    Allowed(usize, Option<String>),
    /// The denying rule and the code.
    Denied(usize, &'static str),
    /// Every reaching allow rule with the code of the clause that failed, sorted by index.
    NotPermitted(Vec<(usize, &'static str)>),
    NotMounted,
}

/// `..` pops, `.` and empty components vanish, never above `/`.
fn push_components(parts: &mut Vec<String>, raw: &str) {
    for c in raw.split('/') {
        if c.is_empty() || c == "." {
            continue;
        }
        if c == ".." {
            parts.pop();
            continue;
        }
        parts.push(c.to_owned());
    }
}

/// The normalized components of an absolute path that can be read.
fn absolute(raw: &str) -> Option<Vec<String>> {
    if !raw.starts_with('/') || raw.contains('\0') {
        return None;
    }
    let mut parts = Vec::new();
    push_components(&mut parts, raw);
    Some(parts)
}

fn id_fills_a_component(who: Who) -> bool {
    let id = who.id();
    !id.is_empty() && id != "." && id != ".." && !id.contains('/') && !id.contains('\0')
}

/// A root's components for `who`, or `None` when its template cannot be filled.
fn concrete_root(root: &str, who: Who) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for c in root.split('/') {
        if c.is_empty() {
            continue;
        }
        if c == "{principal.id}" {
            if !id_fills_a_component(who) {
                return None;
            }
            out.push(who.id().to_owned());
        } else {
            out.push(c.to_owned());
        }
    }
    Some(out)
}

fn under_a_root(parts: &[String], scope: &ScopeM, who: Who) -> bool {
    for root in &scope.roots {
        let root_parts: Vec<&str> = root.split('/').filter(|c| !c.is_empty()).collect();
        if root_parts.len() > parts.len() {
            continue;
        }
        let mut all = true;
        for (k, rp) in root_parts.iter().enumerate() {
            let want = if *rp == "{principal.id}" {
                who.id()
            } else {
                rp
            };
            if parts[k] != want {
                all = false;
            }
        }
        if all {
            return true;
        }
    }
    false
}

/// `*` matches any run of characters inside one component; everything else is literal.
fn wildmatch(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            for skip in 0..=s.len() {
                if wildmatch(rest, &s[skip..]) {
                    return true;
                }
            }
            false
        }
        Some((c, rest)) => match s.split_first() {
            Some((d, srest)) if c == d => wildmatch(rest, srest),
            _ => false,
        },
    }
}

/// A deny glob: with a leading `/` it matches a prefix of the path, component by component;
/// without one it matches any single component. Either way it covers what lies beneath.
fn glob_matches(pattern: &str, parts: &[String]) -> bool {
    if pattern.starts_with('/') {
        let pats: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
        if pats.len() > parts.len() {
            return false;
        }
        for (k, p) in pats.iter().enumerate() {
            if !wildmatch(p.as_bytes(), parts[k].as_bytes()) {
                return false;
            }
        }
        true
    } else {
        for c in parts {
            if wildmatch(pattern.as_bytes(), c.as_bytes()) {
                return true;
            }
        }
        false
    }
}

fn any_glob_matches(scope: &ScopeM, parts: &[String]) -> bool {
    for g in &scope.deny {
        if glob_matches(g, parts) {
            return true;
        }
    }
    false
}

fn protected(parts: &[String]) -> bool {
    match parts.first() {
        Some(first) => first == "proc" || first == "sys" || first == "dev",
        None => false,
    }
}

/// The raw path argument: `None` when the op has no path parameter, `Some(None)` when a
/// required one is missing.
fn raw_path(req: &ReqM) -> Option<Option<String>> {
    match req.op.path_param() {
        PathParam::None => None,
        PathParam::Required | PathParam::Optional => Some(match &req.path {
            PathArgM::Missing if req.op.path_param() == PathParam::Optional => Some(".".to_owned()),
            PathArgM::Missing => None,
            PathArgM::NotAString => Some("\0".to_owned()),
            PathArgM::Str(s) => Some(s.clone()),
        }),
    }
}

/// Resolves the raw path for an allow rule's scope: relative paths anchor at the first root
/// whose template can be filled.
fn resolve(raw: &str, scope: &ScopeM, who: Who) -> Option<Vec<String>> {
    if raw.is_empty() || raw.contains('\0') {
        return None;
    }
    if raw.starts_with('/') {
        return absolute(raw);
    }
    for root in &scope.roots {
        if let Some(mut parts) = concrete_root(root, who) {
            push_components(&mut parts, raw);
            return Some(parts);
        }
    }
    None
}

/// `arg` resolved beneath `jail`: a relative argument may never climb above it, an absolute
/// one must normalize to a path under it.
fn beneath(jail: &[String], arg: &str) -> Option<Vec<String>> {
    if arg.is_empty() || arg.contains('\0') {
        return None;
    }
    if arg.starts_with('/') {
        let parts = absolute(arg)?;
        if parts.len() < jail.len() || parts[..jail.len()] != *jail {
            return None;
        }
        return Some(parts);
    }
    let mut parts = jail.to_vec();
    for c in arg.split('/') {
        if c.is_empty() || c == "." {
            continue;
        }
        if c == ".." {
            if parts.len() <= jail.len() {
                return None;
            }
            parts.pop();
            continue;
        }
        parts.push(c.to_owned());
    }
    Some(parts)
}

/// One allow rule's clauses: the resolved path (or a command's effective cwd), if the op has
/// one, or the failing code.
fn check_allow(rule: &RuleM, req: &ReqM) -> Result<Option<Vec<String>>, &'static str> {
    match req.op.needs() {
        Needs::Nothing => {}
        Needs::Paths if rule.scope.is_some() => {}
        Needs::Commands if rule.commands => {}
        Needs::Paths | Needs::Commands | Needs::Urls => return Err("policy.scope_required"),
    }
    if req.op == Op::Run {
        // The argv always starts with `cat`, so `cat ...` admits it; only the cwd can fail.
        let Some(jail) = absolute(COMMAND_CWD) else {
            unreachable!("the model cwd is absolute")
        };
        return match &req.cwd {
            None => Ok(Some(jail)),
            Some(c) => beneath(&jail, c)
                .map(Some)
                .ok_or("policy.cwd_outside_scope"),
        };
    }
    let mut resolved = None;
    if let Some(raw) = raw_path(req) {
        let Some(raw) = raw else {
            return Err("policy.arg_invalid");
        };
        let Some(scope) = &rule.scope else {
            return Err("policy.scope_required");
        };
        let Some(parts) = resolve(&raw, scope, req.who) else {
            return Err("policy.path_invalid");
        };
        if !under_a_root(&parts, scope, req.who) {
            return Err("policy.path_outside_scope");
        }
        if any_glob_matches(scope, &parts) {
            return Err("policy.path_denied");
        }
        if protected(&parts) {
            return Err("policy.path_denied");
        }
        resolved = Some(parts);
    }
    if let Some(scope) = &rule.scope
        && scope.readonly
        && req.op.mutates_files()
    {
        return Err("policy.readonly");
    }
    Ok(resolved)
}

fn reaches_principal(rule: &RuleM, who: Who) -> bool {
    if rule.principals.is_empty() {
        return true;
    }
    for p in &rule.principals {
        if p.matches(who) {
            return true;
        }
    }
    false
}

fn deny_reaches(rule: &RuleM, req: &ReqM) -> bool {
    if rule.allow || !reaches_principal(rule, req.who) {
        return false;
    }
    for s in &rule.sels {
        if s.reaches(req.op) {
            return true;
        }
    }
    false
}

/// Whether a deny rule (already reaching op and caller) hits the call.
fn deny_hits(rule: &RuleM, req: &ReqM, resolved: Option<&Vec<String>>) -> bool {
    let Some(scope) = &rule.scope else {
        return true;
    };
    let mut candidates: Vec<Vec<String>> = Vec::new();
    if let Some(r) = resolved {
        candidates.push(r.clone());
    }
    if let Some(Some(raw)) = raw_path(req) {
        if raw.is_empty() || raw.contains('\0') {
            return true;
        }
        if let Some(abs) = absolute(&raw) {
            candidates.push(abs);
        }
    }
    if req.op == Op::Run {
        for s in req.cwd.iter().chain(req.argv.iter()) {
            if let Some(abs) = absolute(s) {
                candidates.push(abs);
            }
        }
        // With a winner, `resolved` is the effective cwd; relative arguments (but a bare
        // program name) are resolved from it.
        if let Some(cwd) = resolved {
            for (k, a) in req.argv.iter().enumerate() {
                if a.starts_with('/') || a.contains('\0') || (k == 0 && !a.contains('/')) {
                    continue;
                }
                let mut parts = cwd.clone();
                push_components(&mut parts, a);
                candidates.push(parts);
            }
        }
    }
    for c in &candidates {
        if under_a_root(c, scope, req.who) || any_glob_matches(scope, c) {
            return true;
        }
    }
    false
}

fn allow_mounts(rule: &RuleM, req: &ReqM) -> bool {
    if !rule.allow || !reaches_principal(rule, req.who) {
        return false;
    }
    for s in &rule.sels {
        if s.mounts(req.op) {
            return true;
        }
    }
    false
}

fn reference(rules: &[RuleM], req: &ReqM) -> Outcome {
    if req.op == Op::Unknown {
        return Outcome::NotMounted;
    }
    let mut reaching = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if allow_mounts(r, req) {
            reaching.push(i);
        }
    }
    if reaching.is_empty() && req.op != Op::Health {
        return Outcome::NotMounted;
    }

    let mut winner: Option<(usize, Option<Vec<String>>)> = None;
    let mut failures = Vec::new();
    for &i in &reaching {
        match check_allow(&rules[i], req) {
            Ok(resolved) => {
                winner = Some((i, resolved));
                break;
            }
            Err(code) => failures.push((i, code)),
        }
    }
    if winner.is_none() && req.op == Op::Health && reaching.is_empty() {
        winner = Some((usize::MAX, None));
    }
    let resolved = winner.as_ref().and_then(|(_, r)| r.as_ref());

    for (i, r) in rules.iter().enumerate() {
        if deny_reaches(r, req) && deny_hits(r, req, resolved) {
            return Outcome::Denied(i, "policy.denied");
        }
    }

    let Some((w, resolved)) = winner else {
        return Outcome::NotPermitted(failures);
    };

    if let Some(parts) = resolved.as_ref().filter(|_| req.op != Op::Run) {
        for &i in &reaching {
            if let Some(scope) = &rules[i].scope
                && under_a_root(parts, scope, req.who)
                && any_glob_matches(scope, parts)
            {
                return Outcome::Denied(i, "policy.path_denied");
            }
        }
    }
    Outcome::Allowed(w, resolved.map(|p| format!("/{}", p.join("/"))))
}

/// Whether the op is mounted and not denied outright, per the model.
fn reference_mounted(rules: &[RuleM], req: &ReqM) -> bool {
    if req.op == Op::Unknown {
        return false;
    }
    let mut mounted = req.op == Op::Health;
    let mut wholly_denied = false;
    for r in rules {
        if allow_mounts(r, req) {
            mounted = true;
        }
        if deny_reaches(r, req) && r.scope.is_none() {
            wholly_denied = true;
        }
    }
    mounted && !wholly_denied
}

fn engine_outcome(d: &Decision) -> Outcome {
    match d {
        Decision::Allowed(a) => {
            let path = a
                .paths
                .iter()
                .find(|(n, _)| n == "path")
                .map(|(_, p)| p.absolute());
            let cwd = a
                .command
                .as_ref()
                .and_then(|c| c.cwd.as_ref())
                .map(|c| c.absolute());
            Outcome::Allowed(a.rule.index, path.or(cwd))
        }
        Decision::Denied { rule, code, .. } => Outcome::Denied(rule.index, code),
        Decision::NotPermitted { candidates } => {
            let mut c: Vec<(usize, &'static str)> =
                candidates.iter().map(|c| (c.rule.index, c.code)).collect();
            c.sort();
            Outcome::NotPermitted(c)
        }
        Decision::NotMounted => Outcome::NotMounted,
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies.

const COMPONENTS: [&str; 12] = [
    "data", "data2", "sub", "x", "..", ".", "a.secret", "ws", "alice", "bob", "proc", "",
];

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Health),
        3 => Just(Op::List),
        5 => Just(Op::Read),
        3 => Just(Op::Write),
        2 => Just(Op::Delete),
        3 => Just(Op::Run),
        1 => Just(Op::Fetch),
        1 => Just(Op::Unknown),
    ]
}

fn sel_strategy() -> impl Strategy<Value = Sel> {
    prop_oneof![
        4 => prop::sample::select(KNOWN_OPS.to_vec()).prop_map(Sel::Exact),
        3 => Just(Sel::FilesStar),
        2 => Just(Sel::EffectRead),
        1 => Just(Sel::EffectWrite),
        1 => Just(Sel::TierConfirm),
        2 => Just(Sel::All),
        3 => Just(Sel::GroupFileOps),
        1 => Just(Sel::GroupFileRead),
    ]
}

fn psel_strategy() -> impl Strategy<Value = PSel> {
    prop::sample::select(vec![
        PSel::IdAlice,
        PSel::IdBob,
        PSel::IdDotDot,
        PSel::RoleR,
        PSel::Any,
    ])
}

fn who_strategy() -> impl Strategy<Value = Who> {
    prop_oneof![
        4 => Just(Who::Alice),
        2 => Just(Who::Bob),
        1 => Just(Who::DotDot),
        1 => Just(Who::Slash),
        1 => Just(Who::Anonymous),
    ]
}

fn root_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just(ROOTS[0]),
        2 => Just(ROOTS[1]),
        2 => Just(ROOTS[2]),
        2 => Just(ROOTS[3]),
        1 => Just(ROOTS[4]),
    ]
}

fn scope_strategy() -> impl Strategy<Value = ScopeM> {
    (
        prop::collection::vec(root_strategy(), 1..3),
        prop::collection::vec(prop::sample::select(DENY_GLOBS.to_vec()), 0..3),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(roots, deny, readonly)| ScopeM {
            roots,
            deny,
            readonly,
        })
}

fn rule_strategy() -> impl Strategy<Value = RuleM> {
    (
        prop::bool::weighted(0.7),
        prop::collection::vec(sel_strategy(), 1..3),
        prop_oneof![
            2 => Just(Vec::new()),
            1 => prop::collection::vec(psel_strategy(), 1..3),
        ],
        prop::option::weighted(0.8, scope_strategy()),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(allow, sels, principals, scope, commands)| RuleM {
            allow,
            sels,
            principals,
            scope,
            commands: allow && commands,
        })
}

fn path_strategy() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec![
        "/data/",
        "/data2/",
        "/data/sub/",
        "/ws/alice/",
        "/ws/",
        "/",
        "",
        "./",
        "../",
        "//data/",
    ]);
    let built = (
        prefix,
        prop::collection::vec(prop::sample::select(COMPONENTS.to_vec()), 0..4),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(prefix, comps, trailing)| {
            let mut s = format!("{prefix}{}", comps.join("/"));
            if trailing {
                s.push('/');
            }
            s
        });
    prop_oneof![
        20 => built,
        1 => Just(String::new()),
        1 => Just("/data/x\0".to_owned()),
        1 => Just("/d\u{430}ta/x".to_owned()),
        1 => Just(".".to_owned()),
    ]
}

fn req_strategy() -> impl Strategy<Value = ReqM> {
    let path = prop_oneof![
        1 => Just(PathArgM::Missing),
        1 => Just(PathArgM::NotAString),
        18 => path_strategy().prop_map(PathArgM::Str),
    ];
    (
        op_strategy(),
        who_strategy(),
        path,
        prop::collection::vec(path_strategy(), 0..3),
        prop::option::of(path_strategy()),
    )
        .prop_map(|(op, who, path, rest, cwd)| {
            let mut argv = vec!["cat".to_owned()];
            argv.extend(rest);
            ReqM {
                op,
                who,
                path,
                argv,
                cwd,
            }
        })
}

// ---------------------------------------------------------------------------------------------
// The property.

fn check(rules: &[RuleM], req: &ReqM) -> Result<(), TestCaseError> {
    let engine = Engine::new(Catalog::builtin(), build_policy(rules));
    let who = req.who.build();
    let args = req.args();
    let request = Request {
        op: req.op.id(),
        principal: &who,
        args: &args,
    };
    let decision = engine.decide(&request);
    let want = reference(rules, req);
    prop_assert_eq!(engine_outcome(&decision), want, "decision {:?}", decision);

    let explained = engine.explain(&request);
    prop_assert_eq!(&explained.decision, &decision);
    prop_assert_eq!(explained.trace.len(), rules.len());

    prop_assert_eq!(
        engine.is_mounted(req.op.id(), &who),
        reference_mounted(rules, req)
    );

    if let Decision::Allowed(a) = &decision {
        for (_, p) in &a.paths {
            prop_assert!(!p.relative().split('/').any(|c| c == ".." || c == "."));
            prop_assert!(p.absolute().starts_with(p.root()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn the_engine_decides_like_the_naive_reference_on_random_policies(
        rules in prop::collection::vec(rule_strategy(), 0..7),
        req in req_strategy(),
    ) {
        check(&rules, &req)?;
    }
}

/// The model's op facts agree with the builtin catalog, so the reference is not testing a
/// catalog of its own invention.
#[test]
fn the_reference_model_matches_the_builtin_catalog() {
    let catalog = Catalog::builtin();
    for op in KNOWN_OPS {
        let Some(spec) = catalog.get(op.id()) else {
            unreachable!("`{}` is a builtin op", op.id())
        };
        assert_eq!(
            spec.effective_effects().to_string(),
            op.effect(),
            "{}",
            op.id()
        );
        assert_eq!(spec.tier().as_str(), op.tier(), "{}", op.id());
        assert_eq!(spec.explicit_only, op.explicit_only(), "{}", op.id());
        let groups: Vec<&str> = spec.groups.iter().map(String::as_str).collect();
        assert_eq!(groups, op.groups(), "{}", op.id());
        for sel in [
            Sel::FilesStar,
            Sel::EffectRead,
            Sel::EffectWrite,
            Sel::TierConfirm,
            Sel::All,
            Sel::GroupFileOps,
            Sel::GroupFileRead,
            Sel::Exact(op),
        ] {
            assert_eq!(
                sel.build().reaches(spec),
                sel.reaches(op),
                "{sel:?} on {}",
                op.id()
            );
            assert_eq!(
                sel.build().mounts(spec),
                sel.mounts(op),
                "{sel:?} on {}",
                op.id()
            );
        }
    }
    assert!(catalog.get(Op::Unknown.id()).is_none());
}

/// Hand-picked cases the random search might reach only rarely.
#[test]
fn the_reference_and_the_engine_agree_on_hand_picked_corner_cases() {
    let scope = |roots: &[&'static str], deny: &[&'static str], readonly: bool| ScopeM {
        roots: roots.to_vec(),
        deny: deny.to_vec(),
        readonly,
    };
    let allow = |sels: Vec<Sel>, s: Option<ScopeM>| RuleM {
        allow: true,
        sels,
        principals: vec![],
        scope: s,
        commands: false,
    };
    let deny = |sels: Vec<Sel>, s: Option<ScopeM>| RuleM {
        allow: false,
        sels,
        principals: vec![],
        scope: s,
        commands: false,
    };
    let run = |argv: &[&str], cwd: Option<&str>| ReqM {
        op: Op::Run,
        who: Who::Alice,
        path: PathArgM::Missing,
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        cwd: cwd.map(str::to_owned),
    };
    let runner = RuleM {
        commands: true,
        ..allow(vec![Sel::Exact(Op::Run)], None)
    };
    let no_sub = deny(vec![Sel::All], Some(scope(&["/data/sub"], &[], false)));
    let read = |p: &str| ReqM {
        op: Op::Read,
        who: Who::Alice,
        path: PathArgM::Str(p.to_owned()),
        argv: vec![],
        cwd: None,
    };
    let cases: Vec<(Vec<RuleM>, ReqM, Outcome)> = vec![
        // A relative path is denied where the winner puts it.
        (
            vec![
                allow(
                    vec![Sel::GroupFileOps],
                    Some(scope(&["/data2"], &[], false)),
                ),
                deny(vec![Sel::All], Some(scope(&["/data2/x"], &[], false))),
            ],
            read("x/y"),
            Outcome::Denied(1, "policy.denied"),
        ),
        // A glob of a losing allow rule still beats the winner...
        (
            vec![
                allow(
                    vec![Sel::Exact(Op::Read)],
                    Some(scope(&["/data"], &["*.secret"], false)),
                ),
                allow(vec![Sel::GroupFileOps], Some(scope(&["/data"], &[], false))),
            ],
            read("/data/a.secret"),
            Outcome::Denied(0, "policy.path_denied"),
        ),
        // ...and so does one of a later rule.
        (
            vec![
                allow(vec![Sel::GroupFileOps], Some(scope(&["/data"], &[], false))),
                allow(
                    vec![Sel::EffectRead],
                    Some(scope(&["/data"], &["*.secret"], false)),
                ),
            ],
            read("/data/a.secret"),
            Outcome::Denied(1, "policy.path_denied"),
        ),
        // A glob of a rule that does not reach the op does nothing.
        (
            vec![
                allow(
                    vec![Sel::Exact(Op::Write)],
                    Some(scope(&["/data"], &["*.secret"], false)),
                ),
                allow(vec![Sel::GroupFileOps], Some(scope(&["/data"], &[], false))),
            ],
            read("/data/a.secret"),
            Outcome::Allowed(1, Some("/data/a.secret".to_owned())),
        ),
        // `..` in an absolute path lands outside the root.
        (
            vec![allow(vec![Sel::All], Some(scope(&["/data"], &[], false)))],
            read("/data/../data2/x"),
            Outcome::NotPermitted(vec![(0, "policy.path_outside_scope")]),
        ),
        // The unsafe `/` root still never reaches /proc.
        (
            vec![allow(vec![Sel::All], Some(scope(&["/"], &[], false)))],
            read("/data/../proc/x"),
            Outcome::NotPermitted(vec![(0, "policy.path_denied")]),
        ),
        // A deny rule scoped to paths says nothing about a call without paths.
        (
            vec![deny(vec![Sel::All], Some(scope(&["/data"], &[], false)))],
            ReqM {
                op: Op::Health,
                who: Who::Anonymous,
                path: PathArgM::Missing,
                argv: vec![],
                cwd: None,
            },
            Outcome::Allowed(usize::MAX, None),
        ),
        // ...but it does cover an argv item under its roots.
        (
            vec![
                allow(vec![Sel::Exact(Op::Run)], None),
                deny(vec![Sel::All], Some(scope(&["/data"], &[], false))),
            ],
            ReqM {
                op: Op::Run,
                who: Who::Alice,
                path: PathArgM::Missing,
                argv: vec!["cat".to_owned(), "/data/../data/x".to_owned()],
                cwd: None,
            },
            Outcome::Denied(1, "policy.denied"),
        ),
        // A templated root is the caller's own.
        (
            vec![allow(
                vec![Sel::All],
                Some(scope(&["/ws/{principal.id}"], &[], false)),
            )],
            read("/ws/bob/x"),
            Outcome::NotPermitted(vec![(0, "policy.path_outside_scope")]),
        ),
        (
            vec![allow(
                vec![Sel::All],
                Some(scope(&["/ws/{principal.id}"], &[], false)),
            )],
            read("notes"),
            Outcome::Allowed(0, Some("/ws/alice/notes".to_owned())),
        ),
        // A command runs in the scope's cwd...
        (
            vec![runner.clone(), no_sub.clone()],
            run(&["cat", "x"], None),
            Outcome::Allowed(0, Some("/data".to_owned())),
        ),
        // ...and a relative cwd that lands in a denied directory is denied like an absolute one.
        (
            vec![runner.clone(), no_sub.clone()],
            run(&["cat", "x"], Some("sub")),
            Outcome::Denied(1, "policy.denied"),
        ),
        (
            vec![runner.clone(), no_sub.clone()],
            run(&["cat", "x"], Some("/data/sub")),
            Outcome::Denied(1, "policy.denied"),
        ),
        // So is a relative argument resolved from the cwd.
        (
            vec![runner.clone(), no_sub.clone()],
            run(&["cat", "sub/x"], None),
            Outcome::Denied(1, "policy.denied"),
        ),
        (
            vec![runner.clone(), no_sub.clone()],
            run(&["cat", "../sub/k"], Some("x")),
            Outcome::Denied(1, "policy.denied"),
        ),
        // A cwd that climbs out of the scope is refused.
        (
            vec![runner.clone()],
            run(&["cat"], Some("../etc")),
            Outcome::NotPermitted(vec![(0, "policy.cwd_outside_scope")]),
        ),
    ];
    for (rules, req, want) in cases {
        let got = reference(&rules, &req);
        assert_eq!(got, want, "reference on {rules:?} {req:?}");
        assert!(check(&rules, &req).is_ok(), "engine on {rules:?} {req:?}");
    }
}
