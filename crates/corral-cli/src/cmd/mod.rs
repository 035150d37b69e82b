//! One module per subcommand, plus the config loading they share.

pub mod audit;
pub mod call;
pub mod check_config;
pub mod confirm;
pub mod describe;
pub mod doctor;
pub mod explain;
pub mod healthcheck;
pub mod init;
pub mod mcp;
pub mod run;
pub mod serve;

use std::path::{Path, PathBuf};

use corral_config::{LoadError, Loaded};

/// The config path: the flag, else `$CORRAL_CONFIG`, else `./corral.yaml`.
pub fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("CORRAL_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("corral.yaml"))
}

/// Loads the config; on failure prints the rendered errors to stderr.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    corral_config::load_file(path)
}
