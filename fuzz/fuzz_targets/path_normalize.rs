//! Any text as a path: normalising never panics and never yields `.`, `..` or an empty part;
//! a path a scope admits lies beneath its root, with no `..` left in it.
#![no_main]

use corral_policy::Principal;
use corral_policy::scope::path::{PathScope, PathScopeSpec, normalize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(parts) = normalize(raw) {
        assert!(
            parts.iter().all(|p| !p.is_empty() && *p != "." && *p != ".."),
            "{parts:?}"
        );
        let joined = format!("/{}", parts.join("/"));
        assert_eq!(normalize(&joined), Some(parts.clone()), "idempotent");
    }
    let scope = PathScope::compile(PathScopeSpec {
        roots: vec!["/srv/root".to_owned()],
        deny: vec![".env".to_owned()],
        ..PathScopeSpec::default()
    })
    .expect("the scope compiles");
    let p = Principal::new("fuzz", &[]);
    if let Ok(jailed) = scope.check(raw, &p) {
        let abs = jailed.absolute();
        assert!(abs == "/srv/root" || abs.starts_with("/srv/root/"), "{abs}");
        assert!(!abs.split('/').skip(1).any(|c| c == ".." || c == "." || c.is_empty()), "{abs}");
    }
});
