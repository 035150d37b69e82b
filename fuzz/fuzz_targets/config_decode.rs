//! Any text as a config: the loader and the lint never panic, and every diagnostic carries a
//! code of the catalog.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let env: HashMap<String, String> = HashMap::from([
        ("CORRAL_FUZZ_TOKEN".to_owned(), "fuzz-token-0123456789abcdef0123".to_owned()),
    ]);
    match corral_config::load_str("fuzz.yaml", text, Path::new("/srv/fuzz"), &env) {
        Ok(loaded) => {
            let findings = corral_config::lint::lint(&loaded);
            for d in &findings {
                assert!(corral_policy::codes::lookup(d.code).is_some(), "{}", d.code);
            }
            let _ = loaded.render(&findings);
        }
        Err(e) => {
            assert!(!e.diagnostics.is_empty(), "a failed load says why");
            for d in &e.diagnostics {
                assert!(corral_policy::codes::lookup(d.code).is_some(), "{}", d.code);
            }
            let _ = e.render();
        }
    }
});
