//! Build script of the `corral` binary: records the git revision it is built from, for
//! `corral --version` (`corral 0.0.0 (29decca)`, `29decca-dirty` with uncommitted changes).
//!
//! The revision is `CORRAL_BUILD_REVISION` when set (an image build, where `.git` is not in the
//! build context, passes it as a build argument), else `git rev-parse --short HEAD` plus
//! `-dirty` when `git status --porcelain` lists a change, else `unknown` (a source tarball, no
//! git installed). The script runs again when HEAD, the branch it points at, or the index
//! moves; an edit that is neither staged nor committed does not rerun it, so a `-dirty` can lag
//! until the next `git add` or commit.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The files whose change means another revision or another dirty state.
fn watch_git_files() {
    let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    let dir = PathBuf::from(dir);
    println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
    println!("cargo:rerun-if-changed={}", dir.join("index").display());
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        // The ref may be packed (no file): then `packed-refs` holds it.
        let loose = dir.join(&branch);
        let file = if loose.exists() {
            loose
        } else {
            dir.join("packed-refs")
        };
        println!("cargo:rerun-if-changed={}", file.display());
    }
}

fn revision() -> String {
    if let Ok(r) = std::env::var("CORRAL_BUILD_REVISION") {
        let r = r.trim();
        if !r.is_empty() {
            return r.to_owned();
        }
    }
    let Some(short) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".to_owned();
    };
    watch_git_files();
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{short}-dirty")
    } else {
        short
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=CORRAL_BUILD_REVISION");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=CORRAL_GIT_REVISION={}", revision());
}
