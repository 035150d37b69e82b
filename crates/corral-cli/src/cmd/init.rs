//! `corral init`: write a commented starter config and check that it loads.

use std::io::Write;
use std::path::{Path, PathBuf};

use corral_policy::presets::Preset;

use crate::context;
use crate::{CliError, CliResult, Exit};

/// Runs `corral init`: writes the starter config of `preset` for `root` to `output`.
pub fn run(preset: &str, root: Option<PathBuf>, output: &Path, force: bool) -> CliResult {
    let preset = Preset::parse(preset)
        .map_err(|e| CliError::coded(e.code(), format!("{e} (`--preset`); {}", e.fix())))?;
    let root = context::root_dir(root.as_deref())?;
    let root_text = root.to_string_lossy().into_owned();
    if root_text == "/" {
        return Err(CliError::usage(
            "`/` cannot be a root (`--root`); pass the directory the agent works in",
        ));
    }
    let text = corral_config::starter::starter(preset, &root_text);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .create_new(!force)
        .open(output);
    let written = file.and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        let hint = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "pass `--force` to overwrite it, or `-o other.yaml`"
        } else {
            "check the directory exists and is writable"
        };
        return Err(CliError::usage(format!(
            "cannot write `{}`: {e}; {hint}",
            output.display()
        )));
    }
    outln!(
        "wrote {} (preset {}, root {root_text})",
        output.display(),
        preset.name()
    );
    outln!("next: corral check-config --strict -c {}", output.display());
    outln!(
        "      corral explain -c {} --op files.read --arg path={root_text}/README.md",
        output.display()
    );
    Ok(Exit::Ok)
}
