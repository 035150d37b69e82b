//! Per-run cgroups (v1 `pids` and `memory` controllers), made by the parent before the helper
//! starts; the helper joins them itself before it forks anything, so everything the sandbox
//! forks is counted from the start.
//!
//! The helper joins by writing `0` to each cgroup's `tasks` (it is single-threaded, so its one
//! thread is the whole process): a task moving itself skips the global threadgroup lock, whose
//! write side waits for an RCU grace period when it was idle (several milliseconds here), which
//! moving another process by its pid in `cgroup.procs` pays.
//!
//! Each run gets `<own cgroup>/corral-<run>` in each hierarchy, with `pids.max` and
//! `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` where swap is accounted). After
//! the run the directories are removed and the removal is checked. A unified (v2) hierarchy is
//! detected and reported, but not used yet.
//!
//! Every directory this module makes has a name no other run, probe or backend of this process
//! (or of another process: the pid is in it) uses at the same time, so two backends starting
//! together never see each other's `EEXIST`. A failure to make one is an error for that run or
//! probe, never a reason to run without the controller.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Numbers the probe cgroups made by this process.
static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

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

/// Checks a per-run cgroup can be made and removed under `base`. The probe's name is unique
/// (pid and a process-wide counter), so concurrent probes never collide.
pub(crate) fn try_create(base: &Path, file: &str) -> Result<(), String> {
    let dir = base.join(format!(
        "corral-probe-{}-{}",
        std::process::id(),
        PROBE_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
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
    /// Makes the run's cgroups: always a `pids` one (every run has a process limit), and a
    /// `memory` one when `memory` is set. `Err` when either cannot be made, whether the host has
    /// no such hierarchy or making the cgroup failed: the run is then refused, never run without
    /// the limit. The `Err` carries whatever was made before the failure, for the caller to
    /// remove.
    pub(crate) fn create(
        support: &Support,
        run_id: &str,
        pids_max: u64,
        memory: Option<u64>,
    ) -> Result<Self, (String, Self)> {
        let mut run = RunCgroups::default();
        match run.fill(support, run_id, pids_max, memory) {
            Ok(()) => Ok(run),
            Err(e) => Err((e, run)),
        }
    }

    fn fill(
        &mut self,
        support: &Support,
        run_id: &str,
        pids_max: u64,
        memory: Option<u64>,
    ) -> Result<(), String> {
        let run = self;
        let name = format!("corral-{run_id}");
        let Some(base) = &support.pids else {
            return Err(missing("pids", support));
        };
        let dir = base.join(&name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        run.dirs.push(("cgroup:pids", dir.clone()));
        write(&dir.join("pids.max"), &pids_max.to_string())?;
        if let Some(limit) = memory {
            let Some(base) = &support.memory else {
                return Err(missing("memory", support));
            };
            let dir = base.join(&name);
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            run.dirs.push(("cgroup:memory", dir.clone()));
            write(&dir.join("memory.limit_in_bytes"), &limit.to_string())?;
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &limit.to_string())?;
            }
        }
        Ok(())
    }

    /// Sets the run's `pids.max` (a warm sandbox is made with room for its own two processes
    /// only, and gets the run's limit before it gets the run).
    pub(crate) fn set_pids_max(&self, pids_max: u64) -> Result<(), String> {
        let dir = self
            .dirs
            .iter()
            .find_map(|(name, dir)| (*name == "cgroup:pids").then_some(dir))
            .ok_or("the run has no pids cgroup")?;
        write(&dir.join("pids.max"), &pids_max.to_string())
    }

    /// The run's cgroup directories, for the helper to join.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = &Path> + '_ {
        self.dirs.iter().map(|(_, dir)| dir.as_path())
    }

    /// Whether the run has the cgroup named `primitive` (e.g. `cgroup:pids`).
    pub(crate) fn has(&self, primitive: &str) -> bool {
        self.dirs.iter().any(|(name, _)| *name == primitive)
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

/// Why a run that needs `controller` cannot have it here.
fn missing(controller: &str, support: &Support) -> String {
    let v2 = match &support.v2 {
        Some(p) => format!(
            " (only a unified v2 hierarchy is mounted, at {}, which corral does not use yet)",
            p.display()
        ),
        None => String::new(),
    };
    format!(
        "no cgroup v1 `{controller}` hierarchy holding corral's own cgroup is mounted{v2}; the run's `{controller}` limit cannot be enforced, so it is refused"
    )
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value} to {}: {e}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// This host's `pids` hierarchy; `None` (a skip, which fails under `CI=true`) without one.
    fn pids_base() -> Option<PathBuf> {
        let base = detect().pids;
        if base.is_none() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no v1 pids hierarchy here and CI=true"
            );
            eprintln!("notice: no v1 pids hierarchy here; skipping");
        }
        base
    }

    #[test]
    fn concurrent_probes_never_collide() {
        let Some(base) = pids_base() else { return };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let (base, barrier) = (base.clone(), std::sync::Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..8)
                        .map(|_| try_create(&base, "pids.max"))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for r in h.join().unwrap() {
                assert_eq!(r, Ok(()));
            }
        }
    }

    #[test]
    fn a_run_without_a_pids_hierarchy_is_refused() {
        let (e, partial) = RunCgroups::create(&Support::default(), "t-nopids", 10, None)
            .expect_err("no pids hierarchy, no run");
        assert!(e.contains("`pids`"), "{e}");
        assert!(partial.dirs.is_empty());
    }

    #[test]
    fn a_memory_limit_without_a_memory_hierarchy_is_refused() {
        let Some(base) = pids_base() else { return };
        let support = Support {
            pids: Some(base),
            memory: None,
            v2: None,
        };
        let id = format!("t-nomem-{}", std::process::id());
        let (e, partial) = RunCgroups::create(&support, &id, 10, Some(1 << 20))
            .expect_err("a memory limit without a memory hierarchy");
        assert!(e.contains("`memory`"), "{e}");
        // The pids cgroup made on the way is handed back, and removable.
        assert!(partial.has("cgroup:pids"));
        assert!(partial.remove(Duration::from_secs(1)));
        // Without a memory limit the same support makes a run's cgroups.
        let run = RunCgroups::create(&support, &id, 10, None)
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(run.has("cgroup:pids") && !run.has("cgroup:memory"));
        assert!(run.remove(Duration::from_secs(1)));
    }
}
