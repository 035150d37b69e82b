//! `corral serve`: load the config (or build one from `--preset --root`), then run the server.

use std::net::SocketAddr;
use std::path::PathBuf;

use corral_server::{ServeOptions, serve};

use crate::Exit;

/// The flags of `corral serve`.
#[derive(Debug)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub preset: Option<String>,
    pub root: Option<PathBuf>,
    pub listen: SocketAddr,
    pub allow_open: bool,
    pub max_body_bytes: usize,
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("CORRAL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn run(a: Args) -> Exit {
    init_logging();
    let (loaded, config_path) = match &a.preset {
        Some(preset) => {
            let root = match &a.root {
                Some(r) => std::path::absolute(r).unwrap_or_else(|_| r.clone()),
                None => match std::env::current_dir() {
                    Ok(d) => d,
                    Err(e) => {
                        eprintln!(
                            "error: cannot read the current directory: {e}; pass `--root DIR`"
                        );
                        return Exit::Error;
                    }
                },
            };
            if let Err(e) = std::fs::create_dir_all(&root) {
                eprintln!("error: cannot create the root `{}`: {e}", root.display());
                return Exit::Error;
            }
            let text = format!(
                "version: 1\npreset: {preset}\nroot: {}\nstate_dir: .corral\n",
                serde_json::to_string(&root.to_string_lossy()).unwrap_or_default()
            );
            let base = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            match corral_config::load_str("--preset", &text, &base, &corral_config::ProcessEnv) {
                Ok(l) => (l, None),
                Err(e) => {
                    eprint!("{}", e.render());
                    return Exit::Error;
                }
            }
        }
        None => {
            let path = super::config_path(a.config.clone());
            match super::load(&path) {
                Ok(l) => (l, Some(path)),
                Err(e) => {
                    eprint!("{}", e.render());
                    return Exit::Error;
                }
            }
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return Exit::Error;
        }
    };
    let opts = ServeOptions {
        loaded,
        config_path,
        listen: a.listen,
        allow_open: a.allow_open,
        max_body_bytes: a.max_body_bytes,
    };
    match rt.block_on(serve(opts)) {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("error[{}]: {e}", e.code());
            Exit::Error
        }
    }
}
