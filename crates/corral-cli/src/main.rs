//! The `corral` binary: parses nothing itself, only calls the library.

/// mimalloc: the request path allocates and frees many small buffers per call across threads,
/// where glibc's malloc showed as ~15% of the server's CPU under load (`bench/RESULTS.md`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // The linux backend's sandbox helper, dispatched before anything else starts (one thread,
    // no runtime): `corral __sandbox-exec <status-fd>`.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == corral_exec::HELPER_ARG)
    {
        corral_exec::helper_main();
    }
    corral_cli::run()
}
