//! The linux backend's sandbox helper on its own, for corral-exec's tests: the same
//! `helper_main` that `corral __sandbox-exec` runs.

fn main() {
    corral_exec::helper_main()
}
