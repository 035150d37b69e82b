//! Per-run cgroups (v1 `pids` and `memory` controllers), made by the parent before the helper
//! reads its spec, so everything the sandbox forks is counted from the start.
//!
//! Each run gets `<own cgroup>/corral-<run>` in each hierarchy, with `pids.max` and
//! `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap is accounted). After
//! the run the directories are removed and the removal is checked. A unified (v2) hierarchy is
//! detected and reported, but not used yet.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup hierarchies this host offers corral.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Support {
    /// Where per-run `pids` cgroups go (corral's own v1 `pids` cgroup).
    pub(crate) pids: Option<PathBuf>,
    /// Where per-run `memory` cgroups go (corral's own v1 `memory` cgroup).
    pub(crate) memory: Option<PathBuf>,
    /// The mount point of a unified (v2) hierarchy, if any.
    pub(crate) v2: Option<PathBuf>,
}

/// Finds corral's own cgroup in each v1 hierarchy that has `pids` or `memory`.
pub(crate) fn detect() -> Support {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut support = Support::default();
    for line in mountinfo.lines() {
        // `id parent maj:min root mountpoint opts [optional...] - fstype source superopts`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(mountpoint), Some(fstype), Some(superopts)) =
            (left.get(3), left.get(4), right.first(), right.get(2))
        else {
            continue;
        };
        match *fstype {
            "cgroup2" => support.v2 = Some(PathBuf::from(mountpoint)),
            "cgroup" => {
                for controller in ["pids", "memory"] {
                    if !superopts.split(',').any(|o| o == controller) {
                        continue;
                    }
                    let Some(path) = own_path(&own, controller) else {
                        continue;
                    };
                    // The path is relative to the hierarchy's root; the mount shows `root`.
                    let Ok(rel) = Path::new(&path).strip_prefix(root) else {
                        continue;
                    };
                    let dir = Path::new(mountpoint).join(rel);
                    if controller == "pids" {
                        support.pids = Some(dir);
                    } else {
                        support.memory = Some(dir);
                    }
                }
            }
            _ => {}
        }
    }
    support
}

/// corral's own cgroup path in the v1 hierarchy with `controller`.
fn own_path(proc_cgroup: &str, controller: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })
}

/// Checks a per-run cgroup can be made and removed under `base`.
pub(crate) fn try_create(base: &Path, file: &str) -> Result<(), String> {
    let dir = base.join(format!("corral-probe-{}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let ok = dir.join(file).exists();
    std::fs::remove_dir(&dir).map_err(|e| format!("rmdir {}: {e}", dir.display()))?;
    if ok {
        Ok(())
    } else {
        Err(format!("{} has no `{file}`", dir.display()))
    }
}

/// One run's cgroups.
#[derive(Debug, Default)]
pub(crate) struct RunCgroups {
    /// (attestation name, directory)
    dirs: Vec<(&'static str, PathBuf)>,
}

impl RunCgroups {
    /// Makes the run's cgroups. `Err` when a hierarchy that exists could not be used (the run
    /// is then refused, never run without the limit).
    pub(crate) fn create(
        support: &Support,
        run_id: &str,
        pids_max: u64,
        memory: Option<u64>,
    ) -> Result<Self, String> {
        let mut run = RunCgroups::default();
        let name = format!("corral-{run_id}");
        if let Some(base) = &support.pids {
            let dir = base.join(&name);
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            run.dirs.push(("cgroup:pids", dir.clone()));
            write(&dir.join("pids.max"), &pids_max.to_string())?;
        }
        if let (Some(base), Some(limit)) = (&support.memory, memory) {
            let dir = base.join(&name);
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            run.dirs.push(("cgroup:memory", dir.clone()));
            write(&dir.join("memory.limit_in_bytes"), &limit.to_string())?;
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &limit.to_string())?;
            }
        }
        Ok(run)
    }

    /// Moves `pid` into every cgroup of the run.
    pub(crate) fn add(&self, pid: u32) -> Result<(), String> {
        for (_, dir) in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The attestation's names.
    pub(crate) fn primitives(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.dirs.iter().map(|(name, _)| *name)
    }

    /// Whether no process is left in the run's cgroups.
    pub(crate) fn empty(&self) -> bool {
        self.dirs.iter().all(|(_, dir)| {
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .map(|s| s.trim().is_empty())
                .unwrap_or(true)
        })
    }

    /// Removes the cgroups (waiting up to `wait` for the last processes to go), and returns
    /// whether every one is verifiably gone.
    pub(crate) fn remove(self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut all_gone = true;
        for (_, dir) in &self.dirs {
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() < deadline => {
                        tracing::debug!(dir = %dir.display(), error = %e, "cgroup not empty yet");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the run's cgroup");
                        break;
                    }
                }
            }
            if std::fs::symlink_metadata(dir).is_ok() {
                all_gone = false;
            }
        }
        all_gone
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value} to {}: {e}", path.display()))
}
