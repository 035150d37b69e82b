//! PROBE (security review of http.download / url methods / download_only urls): to delete.

use corral_config::load_file_with_env;

fn load_file(p: &std::path::Path) -> Result<corral_config::Loaded, corral_config::LoadError> {
    load_file_with_env(p, &crate::env())
}
use corral_policy::{Args, Decision, Principal, Request};

use crate::load;

const TOKENS: &str = "auth:\n  tokens:\n    - id: bot\n      roles: [operator]\n      token_env: CORRAL_AGENT_TOKEN\n";

fn bot() -> Principal {
    Principal::new("bot", &["operator"])
}

fn show(d: &Decision) -> String {
    match d {
        Decision::Allowed(a) => format!("ALLOWED by rule #{} `{}`", a.rule.index, a.rule.name),
        other => format!("refused {:?}", other.code()),
    }
}

/// Two rules: downloads from a.example.com need no person (`confirm: never`), downloads from
/// b.example.com do (and are capped at 1 KB). The redirect hop's re-decision is allowed by
/// rule B, but the guard only takes its url: the call runs under rule A's confirmation and
/// limits.
#[test]
fn probe_redirect_hop_rule_differs_from_the_calls_rule() {
    let l = load(&format!(
        "version: 1\nrules:\n  - allow: [http.download]\n    confirm: never\n    reason: trusted mirror\n    urls: {{hosts: [a.example.com]}}\n    paths: [/srv/dl]\n    limits: {{max_bytes: 1GB}}\n  - allow: [http.download]\n    urls: {{hosts: [b.example.com]}}\n    paths: [/srv/dl]\n    limits: {{max_bytes: 1KB}}\n{TOKENS}"
    ));
    let dl = |url: &str, method: Option<&str>| {
        let mut args = Args::new().str("url", url).str("path", "x.bin");
        if let Some(m) = method {
            args = args.str("method", m);
        }
        l.engine().decide(&Request {
            op: "http.download",
            principal: &bot(),
            args: &args,
        })
    };
    let first = dl("https://a.example.com/r?to=b", None);
    let hop = dl("https://b.example.com/big.bin", Some("GET"));
    eprintln!("first call: {}", show(&first));
    eprintln!("redirect hop re-decision: {}", show(&hop));
    for (i, o) in l.origins.iter().enumerate() {
        eprintln!("rule #{i}: confirm_never={}", o.confirm_never);
    }
    if let (Decision::Allowed(a), Decision::Allowed(b)) = (&first, &hop) {
        eprintln!("limits of the call: {:?}", a.limits.max_bytes);
        eprintln!("limits of the hop's rule (ignored): {:?}", b.limits.max_bytes);
    }
}

/// A deny naming GET does not cover HEAD.
#[test]
fn probe_deny_get_does_not_cover_head() {
    let l = load(&format!(
        "version: 1\nrules:\n  - allow: [http.fetch]\n    confirm: never\n    reason: t\n    urls: {{hosts: [api.example.com]}}\n  - deny: [http.fetch]\n    urls: {{hosts: [api.example.com], paths: [/private/**], methods: [GET]}}\n{TOKENS}"
    ));
    for m in [None, Some("GET"), Some("HEAD")] {
        let mut args = Args::new().str("url", "https://api.example.com/private/doc");
        if let Some(m) = m {
            args = args.str("method", m);
        }
        let d = l.engine().decide(&Request {
            op: "http.fetch",
            principal: &bot(),
            args: &args,
        });
        eprintln!("http.fetch /private/doc method {m:?}: {}", show(&d));
    }
    // A deny naming only POST on http.download (which only GETs): never hits. Any lint?
    let text = format!(
        "version: 1\nrules:\n  - allow: [http.download]\n    confirm: never\n    reason: t\n    urls: {{hosts: [api.example.com]}}\n    paths: [/srv/dl]\n  - deny: [http.download]\n    urls: {{hosts: [api.example.com], methods: [POST]}}\n{TOKENS}"
    );
    let l = load(&text);
    let d = l.engine().decide(&Request {
        op: "http.download",
        principal: &bot(),
        args: &Args::new()
            .str("url", "https://api.example.com/x")
            .str("path", "x"),
    });
    eprintln!("download under a POST-only deny: {}", show(&d));
    eprintln!(
        "diagnostics: {:?}",
        l.config_diagnostics_probe()
    );
}

trait DiagProbe {
    fn config_diagnostics_probe(&self) -> Vec<String>;
}
impl DiagProbe for corral_config::Loaded {
    fn config_diagnostics_probe(&self) -> Vec<String> {
        corral_config::lint::lint(self)
            .iter()
            .map(|d| format!("{} {}", d.code, d.message))
            .collect()
    }
}

/// download_only with urls: what the writable root lets http.download do.
#[test]
fn probe_download_only_urls_writable_root() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().join("files");
    std::fs::create_dir_all(root.join(".corral")).unwrap();
    std::fs::write(root.join("report.txt"), "quarterly numbers").unwrap();
    std::fs::write(root.join(".env"), "SECRET=1").unwrap();
    std::os::unix::fs::symlink(".env", root.join("innocent.txt")).unwrap();
    // The config beside the root, state outside it.
    let text = format!(
        "version: 1\nstate_dir: {}\npreset: {{name: download_only, root: {}, urls: [files.example.com], confirm: never, reason: t}}\n{TOKENS}",
        ws.path().join("state").display(),
        root.display()
    );
    std::fs::write(ws.path().join("corral.yaml"), &text).unwrap();
    // SAFETY-free: the env var the tokens name.
    let l = match load_file(&ws.path().join("corral.yaml")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("load: {}", e.render());
            return;
        }
    };
    for path in [
        "report.txt",
        "new.bin",
        ".env",
        "innocent.txt",
        ".corral/state.db",
        ".git/config",
        "sub/.git/hooks/post-checkout",
        "HEAD",
        ".envrc",
        "../corral.yaml",
        &ws.path().join("corral.yaml").display().to_string(),
        &ws.path().join("state/corral.db").display().to_string(),
    ] {
        let d = l.engine().decide(&Request {
            op: "http.download",
            principal: &bot(),
            args: &Args::new()
                .str("url", "https://files.example.com/x")
                .str("path", path),
        });
        eprintln!("http.download -> {path:<60} {}", show(&d));
    }
    // The config file inside the root: does it still load?
    let text_in = format!(
        "version: 1\nstate_dir: {}\npreset: {{name: download_only, root: {}, urls: [files.example.com], confirm: never, reason: t}}\n{TOKENS}",
        ws.path().join("state").display(),
        root.display()
    );
    std::fs::write(root.join("corral.yaml"), &text_in).unwrap();
    match load_file(&root.join("corral.yaml")) {
        Ok(_) => eprintln!("config INSIDE the writable root LOADED"),
        Err(e) => eprintln!("config inside the root: {:?}", e.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>()),
    }
    // Without urls, same place: loads (root read-only).
    let text_ro = text_in.replace(", urls: [files.example.com]", "");
    std::fs::write(root.join("corral.yaml"), &text_ro).unwrap();
    eprintln!(
        "without urls, config inside the root loads: {}",
        load_file(&root.join("corral.yaml")).is_ok()
    );
    // State dir inside the root with urls.
    let text_state = format!(
        "version: 1\nstate_dir: {}\npreset: {{name: download_only, root: {}, urls: [files.example.com], confirm: never, reason: t}}\n{TOKENS}",
        root.join("state").display(),
        root.display()
    );
    std::fs::write(ws.path().join("corral.yaml"), &text_state).unwrap();
    match load_file(&ws.path().join("corral.yaml")) {
        Ok(_) => eprintln!("state dir INSIDE the writable root LOADED"),
        Err(e) => eprintln!("state dir inside the root: {:?}", e.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>()),
    }
}
