//! Git repositories that have no `.git` in their path (a bare repository, a fixture or mirror
//! in a workspace): git on the host takes a directory holding a valid `HEAD` for one and runs
//! what its `config` and hooks say, so nothing inside one may be changed by an op or program.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The `HEAD` of a git repository that holds `dir`: `dir` or one of its ancestors up to `/` (as
/// written, and with its symlinks resolved) whose `HEAD` reads as a git head
/// ([`corral_policy::protect::looks_like_git_head`]), is a symlink or another non-file (git
/// follows a symlinked `HEAD`), or cannot be read. `None` when there is none.
pub fn enclosing_repository(dir: &Path) -> Option<PathBuf> {
    let mut forms = vec![dir.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(dir)
        && real != dir
    {
        forms.push(real);
    }
    forms
        .iter()
        .flat_map(|form| form.ancestors())
        .map(|d| d.join(corral_policy::protect::GIT_HEAD))
        .find(|head| is_git_head(head))
}

/// Whether the file at `head` would make its directory a git repository (see
/// [`enclosing_repository`]); a missing `HEAD`, or a directory of that name, does not.
fn is_git_head(head: &Path) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(head) else {
        return false;
    };
    if meta.is_dir() {
        return false;
    }
    if !meta.is_file() {
        return true;
    }
    let mut buf = [0u8; 128];
    match std::fs::File::open(head).and_then(|mut f| f.read(&mut buf)) {
        Ok(n) => corral_policy::protect::looks_like_git_head(buf.get(..n).unwrap_or_default()),
        Err(_) => true,
    }
}
