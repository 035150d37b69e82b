//! `corral init`: write a commented starter config and check that it loads.

use std::io::Write;
use std::path::{Path, PathBuf};

use corral_policy::presets::Preset;

use crate::Exit;

pub fn run(preset: &str, root: Option<PathBuf>, output: &Path, force: bool) -> Exit {
    let preset = match Preset::parse(preset) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error[{}]: {e} (`--preset`); {}", e.code(), e.fix());
            return Exit::Error;
        }
    };
    let root = match root {
        Some(r) => r,
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: cannot read the current directory: {e}; pass `--root DIR`");
                return Exit::Error;
            }
        },
    };
    let root = std::path::absolute(&root).unwrap_or(root);
    let root_text = root.to_string_lossy().into_owned();
    if root_text == "/" {
        eprintln!("error: `/` cannot be a root (`--root`); pass the directory the agent works in");
        return Exit::Error;
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
        eprintln!("error: cannot write `{}`: {e}; {hint}", output.display());
        return Exit::Error;
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
    Exit::Ok
}
