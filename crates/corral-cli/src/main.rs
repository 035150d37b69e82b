//! The `corral` binary: parses nothing itself, only calls the library.

fn main() -> std::process::ExitCode {
    corral_cli::run()
}
