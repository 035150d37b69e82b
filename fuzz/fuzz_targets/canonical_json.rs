//! Any JSON value: its canonical form (RFC 8785) is valid JSON whose own canonical form is
//! itself, and the digest follows the form.
#![no_main]

use corral_guard::canonical::{canonical, digest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let c = canonical(&v);
    let back: serde_json::Value = serde_json::from_str(&c).expect("the canonical form is JSON");
    assert_eq!(canonical(&back), c, "the canonical form is a fixed point");
    assert_eq!(digest(&back), digest(&v));
});
