//! The linux backend's sandbox helper, for corral-agents' tests: the same `helper_main` that
//! `corral __sandbox-exec` runs.

fn main() {
    corral_exec::helper_main()
}
