//! Decision latency of `corral-policy` against `cedar-policy`, side by side, on equivalent
//! policies and the same three calls.
//!
//! Policy with `N` users (N = 10, 100): one allow rule per user `user{i}` for `files.read` and
//! `files.list` under `/data/u{i}` (deny glob `*.secret`), plus two deny rules: nobody reads
//! under `/data/u0/private` or `/data/u{N-1}/private`. So the policies hold N + 2 rules.
//!
//! Every call is made by the LAST user (`user{N-1}`), so its allow rule is the last one either
//! engine meets (worst case for a linear scan):
//! - `allowed`: `files.read /data/u{N-1}/notes/today.txt`
//! - `not_permitted`: `files.read /etc/passwd` (outside every root; Cedar: no permit applies)
//! - `denied`: `files.read /data/u{N-1}/private/diary.txt` (a deny / forbid rule hits)
//!
//! Everything (policies, engines, requests, entities) is built outside the timed closure; only
//! `Engine::decide` / `Authorizer::is_authorized` is timed. `main` checks that both engines
//! agree on allow/deny for every call before anything is timed.

// A benchmark harness, not library code: a broken fixture should abort loudly, so `unwrap`,
// `expect` and `panic!` (via `assert!`) are the right tools here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use cedar_policy::{
    Authorizer, Context, Entities, Entity, EntityUid, PolicySet, Request as CedarRequest,
    RestrictedExpression,
};
use corral_policy::scope::{PathScope, PathScopeSpec};
use corral_policy::{
    Args, Catalog, Decision, Engine, OpId, Policy, Principal, PrincipalSelector, Request, Rule,
    Selector,
};
use divan::{Bencher, black_box};

/// Allow rules (users) per policy. Each policy also holds two deny rules.
const SIZES: &[usize] = &[10, 100];

/// Samples per benchmark, calls per sample, and the least time per benchmark. A sample of 100
/// calls is far above the timer's precision; at least 1000 samples spread over at least 3 s keep
/// a short burst of other load on the machine from moving a sub-microsecond median, and the
/// whole run stays near one minute (most of it in Cedar at 100 rules). `--sample-count`,
/// `--sample-size` and `--min-time` override.
const SAMPLES: u32 = 1000;
const SAMPLE_SIZE: u32 = 100;
const MIN_TIME: Duration = Duration::from_secs(3);

/// The three calls every benchmark makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Allowed,
    NotPermitted,
    Denied,
}

impl Case {
    const ALL: [Case; 3] = [Case::Allowed, Case::NotPermitted, Case::Denied];

    /// The path the last user asks for.
    fn path(self, n: usize) -> String {
        let last = n - 1;
        match self {
            Case::Allowed => format!("/data/u{last}/notes/today.txt"),
            Case::NotPermitted => "/etc/passwd".to_owned(),
            Case::Denied => format!("/data/u{last}/private/diary.txt"),
        }
    }

    fn expect_allow(self) -> bool {
        self == Case::Allowed
    }
}

/// The two users whose `private` directory a deny rule covers.
fn private_users(n: usize) -> [usize; 2] {
    [0, n - 1]
}

// ---------------------------------------------------------------------------------------------
// corral

struct CorralFixture {
    engine: Engine,
    principal: Principal,
    args: Args,
}

impl CorralFixture {
    fn new(n: usize, case: Case) -> Self {
        let read = Selector::Exact(OpId::parse("files.read").unwrap());
        let list = Selector::Exact(OpId::parse("files.list").unwrap());
        let mut policy = Policy::new();
        for i in 0..n {
            let scope = PathScope::compile(PathScopeSpec {
                roots: vec![format!("/data/u{i}")],
                deny: vec!["*.secret".to_owned()],
                ..PathScopeSpec::default()
            })
            .unwrap();
            policy = policy.rule(
                Rule::allow(&format!("user{i}-files"), vec![read.clone(), list.clone()])
                    .principals(vec![PrincipalSelector::Id(format!("user{i}"))])
                    .paths(scope),
            );
        }
        for i in private_users(n) {
            let scope = PathScope::compile(PathScopeSpec {
                roots: vec![format!("/data/u{i}/private")],
                ..PathScopeSpec::default()
            })
            .unwrap();
            policy = policy.rule(
                Rule::deny(&format!("u{i}-private"), vec![read.clone()])
                    .paths(scope)
                    .reason("private files are not readable"),
            );
        }
        assert_eq!(policy.rules.len(), n + 2);
        Self {
            engine: Engine::new(Catalog::builtin(), policy),
            principal: Principal::new(&format!("user{}", n - 1), &[]),
            args: Args::new().str("path", &case.path(n)),
        }
    }

    fn request(&self) -> Request<'_> {
        Request {
            op: "files.read",
            principal: &self.principal,
            args: &self.args,
        }
    }

    fn decide(&self) -> Decision {
        self.engine.decide(&self.request())
    }
}

// ---------------------------------------------------------------------------------------------
// cedar

struct CedarFixture {
    authorizer: Authorizer,
    policies: PolicySet,
    entities: Entities,
    request: CedarRequest,
}

fn cedar_policy_text(n: usize) -> String {
    let mut src = String::new();
    for i in 0..n {
        src.push_str(&format!(
            "permit(principal == User::\"user{i}\", \
             action in [Action::\"files.read\", Action::\"files.list\"], resource)\n\
             when {{ resource.path like \"/data/u{i}/*\" && !(resource.path like \"*.secret\") }};\n"
        ));
    }
    for i in private_users(n) {
        src.push_str(&format!(
            "forbid(principal, action == Action::\"files.read\", resource)\n\
             when {{ resource.path == \"/data/u{i}/private\" \
             || resource.path like \"/data/u{i}/private/*\" }};\n"
        ));
    }
    src
}

impl CedarFixture {
    fn new(n: usize, case: Case) -> Self {
        let policies = PolicySet::from_str(&cedar_policy_text(n)).unwrap();
        assert_eq!(policies.policies().count(), n + 2);
        let resource = EntityUid::from_str(r#"File::"target""#).unwrap();
        let entity = Entity::new(
            resource.clone(),
            HashMap::from([(
                "path".to_owned(),
                RestrictedExpression::new_string(case.path(n)),
            )]),
            HashSet::new(),
        )
        .unwrap();
        let entities = Entities::from_entities([entity], None).unwrap();
        let request = CedarRequest::new(
            EntityUid::from_str(&format!("User::\"user{}\"", n - 1)).unwrap(),
            EntityUid::from_str(r#"Action::"files.read""#).unwrap(),
            resource,
            Context::empty(),
            None,
        )
        .unwrap();
        Self {
            authorizer: Authorizer::new(),
            policies,
            entities,
            request,
        }
    }

    fn is_authorized(&self) -> cedar_policy::Response {
        self.authorizer
            .is_authorized(&self.request, &self.policies, &self.entities)
    }
}

// ---------------------------------------------------------------------------------------------
// agreement check, run before anything is timed

fn check_agreement() {
    for &n in SIZES {
        for case in Case::ALL {
            let corral = CorralFixture::new(n, case).decide();
            let cedar = CedarFixture::new(n, case).is_authorized();
            assert!(
                cedar.diagnostics().errors().next().is_none(),
                "cedar reported evaluation errors for {case:?} at n={n}: {:?}",
                cedar.diagnostics().errors().collect::<Vec<_>>()
            );
            let cedar_allow = cedar.decision() == cedar_policy::Decision::Allow;
            assert_eq!(
                corral.is_allowed(),
                cedar_allow,
                "corral and cedar disagree on {case:?} at n={n}: corral {corral:?}, cedar {cedar:?}"
            );
            assert_eq!(
                corral.is_allowed(),
                case.expect_allow(),
                "{case:?} at n={n}: {corral:?}"
            );
            let shape_ok = match case {
                Case::Allowed => matches!(corral, Decision::Allowed(_)),
                Case::NotPermitted => matches!(corral, Decision::NotPermitted { .. }),
                Case::Denied => matches!(corral, Decision::Denied { .. }),
            };
            assert!(
                shape_ok,
                "{case:?} at n={n}: unexpected corral decision {corral:?}"
            );
        }
    }
    eprintln!(
        "agreement check: corral and cedar agree on all {} calls",
        SIZES.len() * Case::ALL.len()
    );
}

fn main() {
    check_agreement();
    divan::Divan::default()
        .sample_count(SAMPLES)
        .sample_size(SAMPLE_SIZE)
        .min_time(MIN_TIME)
        .config_with_args()
        .main();
}

// ---------------------------------------------------------------------------------------------
// benchmarks

fn bench_corral(bencher: Bencher, n: usize, case: Case) {
    let f = CorralFixture::new(n, case);
    let req = f.request();
    bencher.bench_local(|| f.engine.decide(black_box(&req)));
}

fn bench_cedar(bencher: Bencher, n: usize, case: Case) {
    let f = CedarFixture::new(n, case);
    bencher.bench_local(|| {
        f.authorizer.is_authorized(
            black_box(&f.request),
            black_box(&f.policies),
            black_box(&f.entities),
        )
    });
}

/// `corral_policy::Engine::decide`; the argument is the number of allow rules (users).
mod corral {
    use super::*;

    #[divan::bench(args = SIZES)]
    fn allowed(bencher: Bencher, n: usize) {
        bench_corral(bencher, n, Case::Allowed);
    }

    #[divan::bench(args = SIZES)]
    fn not_permitted(bencher: Bencher, n: usize) {
        bench_corral(bencher, n, Case::NotPermitted);
    }

    #[divan::bench(args = SIZES)]
    fn denied(bencher: Bencher, n: usize) {
        bench_corral(bencher, n, Case::Denied);
    }
}

/// `cedar_policy::Authorizer::is_authorized`; the argument is the number of permit policies.
mod cedar {
    use super::*;

    #[divan::bench(args = SIZES)]
    fn allowed(bencher: Bencher, n: usize) {
        bench_cedar(bencher, n, Case::Allowed);
    }

    #[divan::bench(args = SIZES)]
    fn not_permitted(bencher: Bencher, n: usize) {
        bench_cedar(bencher, n, Case::NotPermitted);
    }

    #[divan::bench(args = SIZES)]
    fn denied(bencher: Bencher, n: usize) {
        bench_cedar(bencher, n, Case::Denied);
    }
}
