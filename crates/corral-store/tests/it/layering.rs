//! Storage links neither the guard chain nor the sandbox crate: corral-store's normal
//! dependencies, followed through the workspace's own crates, never reach corral-guard or
//! corral-exec (the one crate with `unsafe`). Read from `cargo metadata --no-deps --offline`.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::process::Command;

/// Each workspace package's normal (not dev, not build) dependencies, by package name.
fn normal_dependencies() -> HashMap<String, Vec<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("a package list");
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("a package name").to_owned();
            let deps = p["dependencies"]
                .as_array()
                .expect("a dependency list")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("a dependency name").to_owned())
                .collect();
            (name, deps)
        })
        .collect()
}

/// The workspace crates `from` reaches through normal dependencies, each with the path that
/// reaches it (`corral-store -> corral-guard -> corral-exec`).
fn reached_from(from: &str) -> HashMap<String, String> {
    let deps = normal_dependencies();
    assert!(deps.contains_key(from), "{from} is not a workspace member");
    let mut reached = HashMap::from([(from.to_owned(), from.to_owned())]);
    let mut queue = VecDeque::from([from.to_owned()]);
    while let Some(p) = queue.pop_front() {
        let path = reached[&p].clone();
        // Only workspace members have entries: the walk stays inside the workspace.
        for d in deps.get(&p).into_iter().flatten() {
            if !reached.contains_key(d) {
                reached.insert(d.clone(), format!("{path} -> {d}"));
                queue.push_back(d.clone());
            }
        }
    }
    reached
}

#[test]
fn storage_links_neither_the_guard_nor_the_sandbox_crate() {
    let reached = reached_from("corral-store");
    assert!(
        reached.contains_key("corral-ports") && reached.contains_key("corral-policy"),
        "the walk follows corral-store's dependencies: {:?}",
        reached.keys()
    );
    for forbidden in ["corral-exec", "corral-guard"] {
        if let Some(path) = reached.get(forbidden) {
            panic!(
                "corral-store links {forbidden} ({path}); storage implements the ports of \
                 corral-ports and must not link the guard chain or the sandbox crate: take the \
                 type from corral-ports (move it there if it is plain data) and drop the \
                 dependency from crates/corral-store/Cargo.toml"
            );
        }
    }
}
