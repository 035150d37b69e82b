//! Any text as a URL against an allow scope: checking never panics; a granted URL is canonical
//! (checking its canonical form grants the same), is https on an allowed host, and a deny scope
//! for that host covers it.
#![no_main]

use corral_policy::scope::url::{UrlScope, UrlScopeSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let allow = UrlScope::compile(UrlScopeSpec {
        hosts: vec!["example.com".to_owned(), "*.example.org".to_owned()],
        paths: Some(vec!["/api/**".to_owned()]),
        block_private: true,
        ..UrlScopeSpec::default()
    })
    .expect("the allow scope compiles");
    let deny = UrlScope::compile(UrlScopeSpec {
        hosts: vec!["example.com".to_owned(), "*.example.org".to_owned()],
        ..UrlScopeSpec::default()
    })
    .expect("the deny scope compiles");
    for method in ["GET", "POST"] {
        if let Ok(grant) = allow.check(raw, method) {
            let again = allow.check(&grant.url, method).expect("a canonical url is granted again");
            assert_eq!(again.url, grant.url, "canonicalisation is idempotent");
            assert!(grant.url.starts_with("https://"), "{}", grant.url);
            assert!(deny.covers(&grant.url, method), "{}", grant.url);
        }
    }
});
