//! `http.fetch` in config: a url scope's `methods:` (an allow admits `GET` and `HEAD` unless
//! it names others; a deny names the methods it covers).

use corral_policy::{Args, Decision, Principal, Request, codes};

use crate::load;

const TOKENS: &str = "auth:\n  tokens:\n    - id: bot\n      roles: [operator]\n      token_env: CORRAL_AGENT_TOKEN\n";

fn fetch(l: &corral_config::Loaded, method: Option<&str>) -> Decision {
    let mut args = Args::new().str("url", "https://api.example.com/v1/items");
    if let Some(m) = method {
        args = args.str("method", m);
    }
    l.engine().decide(&Request {
        op: "http.fetch",
        principal: &Principal::new("bot", &["operator"]),
        args: &args,
    })
}

fn refused_code(d: &Decision) -> Option<&'static str> {
    match d {
        Decision::Allowed(_) => None,
        other => other.code(),
    }
}

#[test]
fn an_allowed_url_admits_reads_unless_its_scope_names_the_methods() {
    let reads = load(&format!(
        "version: 1\nrules:\n  - allow: [http.fetch]\n    confirm: never\n    reason: a test\n    urls: {{hosts: [api.example.com]}}\n{TOKENS}"
    ));
    assert!(matches!(fetch(&reads, None), Decision::Allowed(_)));
    assert!(matches!(fetch(&reads, Some("HEAD")), Decision::Allowed(_)));
    assert_eq!(
        refused_code(&fetch(&reads, Some("POST"))),
        Some(codes::POLICY_METHOD_NOT_ALLOWED)
    );
    let posts = load(&format!(
        "version: 1\nrules:\n  - allow: [http.fetch]\n    confirm: never\n    reason: a test\n    urls: {{hosts: [api.example.com], methods: [get, post]}}\n{TOKENS}"
    ));
    assert!(matches!(fetch(&posts, Some("POST")), Decision::Allowed(_)));
    assert_eq!(
        refused_code(&fetch(&posts, Some("DELETE"))),
        Some(codes::POLICY_METHOD_NOT_ALLOWED)
    );
}

#[test]
fn a_deny_with_methods_covers_only_those() {
    let l = load(&format!(
        "version: 1\nrules:\n  - allow: [http.fetch]\n    confirm: never\n    reason: a test\n    urls: {{hosts: [api.example.com], methods: [GET, POST, DELETE]}}\n  - deny: [http.fetch]\n    urls: {{hosts: [api.example.com], methods: [DELETE]}}\n{TOKENS}"
    ));
    assert!(matches!(fetch(&l, Some("POST")), Decision::Allowed(_)));
    assert!(!matches!(fetch(&l, Some("DELETE")), Decision::Allowed(_)));
    // A server answers HEAD with its GET handler: a deny of GET covers HEAD too.
    let l = load(&format!(
        "version: 1\nrules:\n  - allow: [http.fetch]\n    confirm: never\n    reason: a test\n    urls: {{hosts: [api.example.com]}}\n  - deny: [http.fetch]\n    urls: {{hosts: [api.example.com], methods: [GET]}}\n{TOKENS}"
    ));
    assert!(!matches!(fetch(&l, Some("HEAD")), Decision::Allowed(_)));
    assert!(!matches!(fetch(&l, None), Decision::Allowed(_)));
}

#[test]
fn a_method_no_scope_may_name_is_a_load_error() {
    let e = crate::load_err(
        "corral.yaml",
        &format!(
            "version: 1\nrules:\n  - allow: [http.fetch]\n    urls: {{hosts: [a.example.com], methods: [CONNECT]}}\n{TOKENS}"
        ),
    );
    let d = crate::the(
        &e.diagnostics,
        codes::CONFIG_INVALID_SCOPE,
        corral_config::Severity::Error,
    );
    assert!(d.message.contains("CONNECT"), "{d:?}");
}

#[test]
fn download_only_with_urls_saves_what_it_gets_from_those_hosts_beneath_its_root() {
    let ws = tempfile::tempdir().expect("tempdir");
    let root = ws.path().display().to_string();
    let l = load(&format!(
        "version: 1\npreset: {{name: download_only, root: {root}, urls: [files.example.com], confirm: never, reason: a test}}\n{TOKENS}"
    ));
    let bot = Principal::new("bot", &["operator"]);
    let dl = |url: &str, path: &str| {
        l.engine().decide(&Request {
            op: "http.download",
            principal: &bot,
            args: &Args::new().str("url", url).str("path", path),
        })
    };
    assert!(matches!(
        dl("https://files.example.com/a.tar.gz", "a.tar.gz"),
        Decision::Allowed(_)
    ));
    assert_eq!(
        refused_code(&dl("https://evil.example.com/a", "a")),
        Some(codes::POLICY_URL_NOT_ALLOWED)
    );
    assert_eq!(
        refused_code(&dl("https://files.example.com/a", "/etc/cron.d/x")),
        Some(codes::POLICY_PATH_OUTSIDE_SCOPE)
    );
    assert_eq!(
        refused_code(&dl("https://files.example.com/a", ".env")),
        Some(codes::POLICY_PATH_DENIED)
    );
    // Without `urls` the preset fetches nothing.
    let plain = load(&format!(
        "version: 1\npreset: {{name: download_only, root: {root}}}\n{TOKENS}"
    ));
    assert!(!plain.engine().is_mounted("http.download", &bot));
    assert!(!l.engine().is_mounted("http.fetch", &bot));
}
