//! A command pattern and an argv (first line the pattern, then one argument per line): parsing
//! and matching never panic, and a command that a deny pattern matches is never allowed, however
//! an allow pattern reads it (deny beats allow).
#![no_main]

use corral_policy::scope::command::{ArgvPattern, CommandScope, CommandScopeSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let pattern = lines.next().unwrap_or_default();
    let argv: Vec<String> = lines.map(str::to_owned).collect();
    let Ok(p) = ArgvPattern::parse(pattern) else {
        return;
    };
    let matched = p.matches(&argv, None);
    let spec = CommandScopeSpec {
        allow: vec![pattern.to_owned(), "{*}".to_owned()],
        deny: vec![pattern.to_owned()],
        ..CommandScopeSpec::default()
    };
    if let Ok(scope) = CommandScope::compile(spec) {
        let granted = scope.check(&argv, None, false).is_ok();
        assert!(!(matched && granted), "a denied command was allowed: {argv:?}");
    }
});
