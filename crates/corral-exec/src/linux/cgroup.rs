//! Per-run cgroups, in the unified (v2) hierarchy or in the v1 `pids` and `memory` hierarchies,
//! made by the parent before the helper starts; the helper joins them itself before it forks
//! anything, so everything the sandbox forks is counted from the start.
//!
//! **Where.** A v2 controller is used when the v2 cgroup per-run cgroups go under (corral's own
//! cgroup, or `isolation.cgroup_parent`) enables it for its children (`cgroup.subtree_control`).
//! When that cgroup offers a controller (`cgroup.controllers`) but does not enable it, corral
//! enables it; in its own cgroup, the "no internal processes" rule first needs corral's process
//! out of the way, in a leaf `<own>/corral-server`. A controller v2 cannot give comes from its v1
//! hierarchy (corral's own cgroup there), as on hybrid hosts. [`Mode`] says which layout the host
//! has; `corral doctor` shows it.
//!
//! **What.** Each run gets one `corral-<run>` directory per place: in v2 one directory with
//! `pids.max`, `memory.max` and `memory.swap.max` (`0`: the memory cap is not stretched by
//! swap); in v1 one per hierarchy, with `pids.max` and `memory.limit_in_bytes` (and
//! `memory.memsw.limit_in_bytes` where swap is accounted). A cgroup is made with room for the
//! sandbox's own processes; the run's limits are written when a run takes the sandbox, and only
//! a limit written is attested. After the run, a v2 cgroup still holding a process is emptied
//! with `cgroup.kill`; the directories are removed and the removal is checked.
//!
//! **Joining.** The helper writes `0` (itself) to `tasks` in v1 (it is single-threaded, so its
//! one thread is the whole process: a task moving itself skips the global threadgroup lock,
//! whose write side waits for an RCU grace period, several milliseconds here) and to
//! `cgroup.procs` in v2, which has no `tasks`.
//!
//! Every directory this module makes has a name no other run, probe or backend of this process
//! (or of another process: the pid is in it) uses at the same time, so two backends starting
//! together never see each other's `EEXIST`. A failure to make a required one is an error for
//! that run or probe, never a reason to run without the controller.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Numbers the probe cgroups made by this process.
static PROBE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The leaf corral moves its own process into before it enables controllers in its own v2
/// cgroup ("no internal processes": a cgroup that gives controllers to children has none).
pub(crate) const SERVER_LEAF: &str = "corral-server";

/// The cgroup layout of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    /// No cgroup hierarchy is mounted.
    #[default]
    None,
    /// Only v1 hierarchies.
    V1,
    /// v1 hierarchies and a unified (v2) tree beside them (controllers are in v1 unless the
    /// unified tree has them).
    Hybrid,
    /// Only the unified (v2) hierarchy.
    Unified,
}

impl Mode {
    /// How `corral doctor` names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::None => "none mounted",
            Mode::V1 => "v1",
            Mode::Hybrid => "hybrid (v1 and v2)",
            Mode::Unified => "v2 (unified)",
        }
    }
}

/// A controller corral uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    Pids,
    Memory,
}

impl Controller {
    pub(crate) const ALL: [Controller; 2] = [Controller::Pids, Controller::Memory];

    /// The kernel's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
        }
    }

    /// The attestation's name, once the run's limit is written.
    pub(crate) fn primitive(self) -> &'static str {
        match self {
            Controller::Pids => "cgroup:pids",
            Controller::Memory => "cgroup:memory",
        }
    }
}

/// Where per-run cgroups of one controller go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// corral's own cgroup in the controller's v1 hierarchy.
    V1(PathBuf),
    /// A v2 cgroup that enables the controller for its children.
    V2(PathBuf),
}

impl Place {
    pub(crate) fn dir(&self) -> &Path {
        match self {
            Place::V1(d) | Place::V2(d) => d,
        }
    }

    fn is_v2(&self) -> bool {
        matches!(self, Place::V2(_))
    }

    /// `v2, under DIR` or `v1, under DIR`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Place::V1(d) => format!("v1, per-run cgroups under {}", d.display()),
            Place::V2(d) => format!("v2, per-run cgroups under {}", d.display()),
        }
    }
}

/// The v2 cgroup per-run cgroups go under, and what it offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct V2Parent {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// Whether it is `isolation.cgroup_parent` (else corral's own cgroup).
    pub(crate) configured: bool,
    /// Its `cgroup.controllers`.
    pub(crate) available: Vec<String>,
    /// Its `cgroup.subtree_control`, after corral enabled what it could.
    pub(crate) enabled: Vec<String>,
    /// Why a controller corral wants is not enabled, when one is not.
    pub(crate) note: Option<String>,
}

/// The cgroup hierarchies this host offers corral.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Support {
    /// The layout.
    pub(crate) mode: Mode,
    /// Where per-run `pids` cgroups go.
    pub(crate) pids: Option<Place>,
    /// Where per-run `memory` cgroups go.
    pub(crate) memory: Option<Place>,
    /// The mount point of the unified hierarchy, if any.
    pub(crate) v2_mount: Option<PathBuf>,
    /// The v2 parent, when there is a unified hierarchy (or a configured parent).
    pub(crate) v2: Option<V2Parent>,
    /// Why the configured parent cannot be used, when it cannot.
    pub(crate) parent_error: Option<String>,
}

impl Support {
    pub(crate) fn place(&self, c: Controller) -> Option<&Place> {
        match c {
            Controller::Pids => self.pids.as_ref(),
            Controller::Memory => self.memory.as_ref(),
        }
    }

    /// The directories per-run cgroups go under (each once).
    pub(crate) fn bases(&self) -> Vec<&Path> {
        let mut out: Vec<&Path> = Vec::new();
        for place in [&self.pids, &self.memory].into_iter().flatten() {
            if !out.contains(&place.dir()) {
                out.push(place.dir());
            }
        }
        out
    }

    /// One line for `corral doctor`: the layout, the v2 parent and its controllers.
    pub(crate) fn describe(&self) -> String {
        let mut s = self.mode.as_str().to_owned();
        if let Some(m) = &self.v2_mount {
            s.push_str(&format!("; unified hierarchy at {}", m.display()));
        }
        if let Some(p) = &self.v2 {
            let list = |v: &[String]| {
                if v.is_empty() {
                    "none".to_owned()
                } else {
                    v.join(" ")
                }
            };
            s.push_str(&format!(
                "; v2 parent {} ({}): controllers {}, enabled for children: {}",
                p.dir.display(),
                if p.configured {
                    "isolation.cgroup_parent"
                } else {
                    "corral's own cgroup"
                },
                list(&p.available),
                list(&p.enabled),
            ));
            if let Some(note) = &p.note {
                s.push_str(&format!(" ({note})"));
            }
        }
        if let Some(e) = &self.parent_error {
            s.push_str(&format!("; isolation.cgroup_parent: {e}"));
        }
        s
    }
}

/// Finds where per-run cgroups go on this host, enabling the v2 controllers corral's cgroup (or
/// `parent`) offers but does not enable yet.
pub(crate) fn detect(parent: Option<&Path>) -> Support {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    detect_in(&mountinfo, &own, parent)
}

/// [`detect`] over given `/proc/self/mountinfo` and `/proc/self/cgroup` contents.
pub(crate) fn detect_in(mountinfo: &str, proc_cgroup: &str, parent: Option<&Path>) -> Support {
    let mut support = Support::default();
    let mut v1_mounted = false;
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
            "cgroup2" => {
                if support.v2_mount.is_some() {
                    continue;
                }
                support.v2_mount = Some(PathBuf::from(mountpoint));
                if parent.is_none()
                    && let Some(dir) = own_path(proc_cgroup, None)
                        .and_then(|path| under_mount(mountpoint, root, &path))
                {
                    support.v2 = Some(v2_parent(&dir, false));
                }
            }
            "cgroup" => {
                v1_mounted = true;
                for c in Controller::ALL {
                    if !superopts.split(',').any(|o| o == c.name()) {
                        continue;
                    }
                    if let Some(dir) = own_path(proc_cgroup, Some(c.name()))
                        .and_then(|path| under_mount(mountpoint, root, &path))
                    {
                        let place = Some(Place::V1(dir));
                        match c {
                            Controller::Pids => support.pids = place,
                            Controller::Memory => support.memory = place,
                        }
                    }
                }
            }
            _ => {}
        }
    }
    support.mode = match (v1_mounted, support.v2_mount.is_some()) {
        (false, false) => Mode::None,
        (true, false) => Mode::V1,
        (true, true) => Mode::Hybrid,
        (false, true) => Mode::Unified,
    };
    if let Some(parent) = parent {
        if !parent.is_absolute() {
            support.parent_error = Some(format!("`{}` is not absolute", parent.display()));
        } else if !parent.join("cgroup.controllers").exists() {
            support.parent_error = Some(format!(
                "`{}` is not a cgroup v2 directory (it has no `cgroup.controllers`)",
                parent.display()
            ));
        } else {
            support.v2 = Some(v2_parent(parent, true));
        }
    }
    // A controller the v2 parent enables for its children is used there; v1 is the fallback.
    if let Some(v2) = &support.v2 {
        for c in Controller::ALL {
            if v2.enabled.iter().any(|e| e == c.name()) {
                let place = Some(Place::V2(v2.dir.clone()));
                match c {
                    Controller::Pids => support.pids = place,
                    Controller::Memory => support.memory = place,
                }
            }
        }
    }
    support
}

/// `mountpoint` joined with `path` made relative to the mount's `root`.
fn under_mount(mountpoint: &str, root: &str, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path).strip_prefix(root).ok()?;
    Some(Path::new(mountpoint).join(rel))
}

/// corral's own cgroup path: in the v1 hierarchy with `controller`, or (`None`) in the unified
/// one (the `0::` line).
fn own_path(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        let hit = match controller {
            Some(c) => controllers.split(',').any(|x| x == c),
            None => id == "0" && controllers.is_empty(),
        };
        hit.then(|| path.to_owned())
    })
}

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .map(|w| w.trim_start_matches('+').to_owned())
        .collect()
}

/// Reads what `dir` offers and enables for its children, and enables the controllers corral
/// wants that it offers but does not enable yet.
fn v2_parent(dir: &Path, configured: bool) -> V2Parent {
    let mut p = V2Parent {
        dir: dir.to_path_buf(),
        configured,
        available: words(&dir.join("cgroup.controllers")),
        enabled: words(&dir.join("cgroup.subtree_control")),
        note: None,
    };
    let wanted: Vec<&str> = Controller::ALL
        .iter()
        .map(|c| c.name())
        .filter(|c| p.available.iter().any(|a| a == c) && !p.enabled.iter().any(|e| e == c))
        .collect();
    if wanted.is_empty() {
        let missing: Vec<&str> = Controller::ALL
            .iter()
            .map(|c| c.name())
            .filter(|c| !p.available.iter().any(|a| a == c))
            .collect();
        if !missing.is_empty() {
            p.note = Some(format!(
                "{} not delegated to it",
                missing
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
        }
        return p;
    }
    // The real root cgroup is the host's: corral never changes what it enables.
    if !dir.join("cgroup.type").exists() {
        p.note = Some("the root cgroup: corral does not enable controllers there; set `isolation.cgroup_parent`".into());
        return p;
    }
    let mut errors = Vec::new();
    for c in &wanted {
        let mut result = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"));
        // Busy: the cgroup has processes. In corral's own cgroup, corral moves into a leaf.
        if !configured
            && result
                .as_ref()
                .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY))
        {
            match move_self_to_leaf(dir) {
                Ok(()) => {
                    result = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}"))
                }
                Err(e) => errors.push(e),
            }
        }
        if let Err(e) = result {
            errors.push(format!(
                "cannot enable `{c}` in its cgroup.subtree_control: {e}"
            ));
        }
    }
    p.enabled = words(&dir.join("cgroup.subtree_control"));
    if !errors.is_empty() {
        p.note = Some(errors.join("; "));
    }
    p
}

/// Moves this process into `<dir>/corral-server` (made if missing), so `dir` can enable
/// controllers for its children.
fn move_self_to_leaf(dir: &Path) -> Result<(), String> {
    let leaf = dir.join(SERVER_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("mkdir {}: {e}", leaf.display())),
    }
    std::fs::write(leaf.join("cgroup.procs"), "0").map_err(|e| {
        format!(
            "cannot move corral into {} (other processes may share its cgroup): {e}",
            leaf.display()
        )
    })
}

/// Checks a per-run cgroup can be made and removed under `base`, with `file` in it. The probe's
/// name is unique (pid and a process-wide counter), so concurrent probes never collide.
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

/// One directory of a run: one per place (a v2 one holds every v2 controller).
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) dir: PathBuf,
    pub(crate) v2: bool,
    controllers: Vec<Controller>,
}

impl Group {
    /// Makes `dir` (which must not exist) as a cgroup for `controllers`.
    pub(crate) fn make(dir: PathBuf, v2: bool) -> Result<Self, String> {
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        Ok(Group {
            dir,
            v2,
            controllers: Vec::new(),
        })
    }

    /// Whether no process is in it.
    pub(crate) fn empty(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.trim().is_empty())
            .unwrap_or(true)
    }

    /// Removes it, waiting until `deadline` for its processes to go (in v2, killing them with
    /// `cgroup.kill` first); whether it is verifiably gone.
    pub(crate) fn remove(&self, deadline: Instant) -> bool {
        if self.v2
            && !self.empty()
            && let Err(e) = std::fs::write(self.dir.join("cgroup.kill"), "1")
        {
            tracing::debug!(dir = %self.dir.display(), error = %e, "cgroup.kill");
        }
        loop {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(dir = %self.dir.display(), error = %e, "cgroup not empty yet");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove the run's cgroup");
                    break;
                }
            }
        }
        std::fs::symlink_metadata(&self.dir).is_err()
    }
}

/// One run's cgroups.
#[derive(Debug, Default)]
pub(crate) struct RunCgroups {
    groups: Vec<Group>,
    /// The controllers whose run limit was written (what is attested).
    limited: Vec<Controller>,
}

impl RunCgroups {
    /// Makes the run's cgroups: one for each controller the host offers, with `pids.max` set
    /// to `own_pids` (the sandbox's own processes) until a run writes its limit. `Err` when a
    /// controller in `required` cannot be had, whether the host has no place for it or making
    /// the cgroup failed: the run is then refused, never run without the limit. A controller
    /// not required whose cgroup cannot be made is left out. The `Err` carries whatever was
    /// made before the failure, for the caller to remove.
    pub(crate) fn create(
        support: &Support,
        run_id: &str,
        own_pids: u64,
        required: &[Controller],
    ) -> Result<Self, (String, Self)> {
        let mut run = RunCgroups::default();
        match run.fill(support, run_id, own_pids, required) {
            Ok(()) => Ok(run),
            Err(e) => Err((e, run)),
        }
    }

    fn fill(
        &mut self,
        support: &Support,
        run_id: &str,
        own_pids: u64,
        required: &[Controller],
    ) -> Result<(), String> {
        let name = format!("corral-{run_id}");
        for c in Controller::ALL {
            let needed = required.contains(&c);
            let Some(place) = support.place(c) else {
                if needed {
                    return Err(missing(c, support));
                }
                continue;
            };
            let dir = place.dir().join(&name);
            let index = match self.groups.iter().position(|g| g.dir == dir) {
                Some(i) => i,
                None => match Group::make(dir, place.is_v2()) {
                    Ok(g) => {
                        self.groups.push(g);
                        self.groups.len() - 1
                    }
                    Err(e) if needed => {
                        return Err(format!(
                            "cannot make the run's `{}` cgroup: {e}; fix: {}",
                            c.name(),
                            fix(c, support)
                        ));
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "no {} cgroup for this sandbox", c.name());
                        continue;
                    }
                },
            };
            if let Some(g) = self.groups.get_mut(index) {
                g.controllers.push(c);
            }
        }
        if self.has(Controller::Pids) {
            self.write_pids_max(own_pids)?;
        }
        Ok(())
    }

    fn group(&self, c: Controller) -> Option<&Group> {
        self.groups.iter().find(|g| g.controllers.contains(&c))
    }

    fn write_pids_max(&self, pids_max: u64) -> Result<(), String> {
        let g = self
            .group(Controller::Pids)
            .ok_or("the run has no pids cgroup")?;
        write(&g.dir.join("pids.max"), &pids_max.to_string())
    }

    /// Writes the run's `pids.max` (a sandbox is made with room for its own processes only, and
    /// gets the run's limit before it gets the run).
    pub(crate) fn set_pids_max(&mut self, pids_max: u64) -> Result<(), String> {
        self.write_pids_max(pids_max)?;
        self.limited.push(Controller::Pids);
        Ok(())
    }

    /// Writes the run's memory limit: `memory.max` and `memory.swap.max` = 0 in v2,
    /// `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, the same) in v1.
    pub(crate) fn set_memory_max(&mut self, bytes: u64) -> Result<(), String> {
        let g = self
            .group(Controller::Memory)
            .ok_or("the run has no memory cgroup")?;
        let value = bytes.to_string();
        if g.v2 {
            write(&g.dir.join("memory.max"), &value)?;
            let swap = g.dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
        } else {
            write(&g.dir.join("memory.limit_in_bytes"), &value)?;
            let memsw = g.dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &value)?;
            }
        }
        self.limited.push(Controller::Memory);
        Ok(())
    }

    /// The run's cgroup directories, for the helper to join.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = &Path> + '_ {
        self.groups.iter().map(|g| g.dir.as_path())
    }

    /// Whether the run has a cgroup with controller `c`.
    pub(crate) fn has(&self, c: Controller) -> bool {
        self.group(c).is_some()
    }

    /// The attestation's names: the controllers whose run limit was written.
    pub(crate) fn primitives(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.limited.iter().map(|c| c.primitive())
    }

    /// Whether no process is left in the run's cgroups.
    pub(crate) fn empty(&self) -> bool {
        self.groups.iter().all(Group::empty)
    }

    /// Removes the cgroups (waiting up to `wait` for the last processes to go), and returns
    /// whether every one is verifiably gone.
    pub(crate) fn remove(self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        let mut all_gone = true;
        for g in &self.groups {
            all_gone &= g.remove(deadline);
        }
        all_gone
    }
}

/// Why a run that needs `c` cannot have it here, and the fix.
pub(crate) fn missing(c: Controller, support: &Support) -> String {
    let name = c.name();
    let found = support.describe();
    format!(
        "no writable cgroup with the `{name}` controller for corral's runs (cgroups: {found}); the run's `{name}` limit cannot be enforced, so it is refused; fix: {}",
        fix(c, support)
    )
}

/// How to give corral a cgroup with controller `c`.
pub(crate) fn fix(c: Controller, support: &Support) -> String {
    let name = c.name();
    match support.mode {
        Mode::V1 => format!(
            "run corral with write access to its own cgroup in the v1 `{name}` hierarchy (or mount it: `mount -t cgroup -o {name} cgroup /sys/fs/cgroup/{name}`)"
        ),
        Mode::Hybrid => format!(
            "give corral's user write access to its own cgroup in the v1 `{name}` hierarchy; or, where the unified hierarchy has the controller, run corral in a cgroup delegated to it: `systemd-run --user --scope -p Delegate=yes corral serve ...`, or a systemd unit with `Delegate=yes` (docs/isolation.md), or set `isolation.cgroup_parent` to a writable v2 cgroup whose parent enables `{name}`"
        ),
        Mode::Unified | Mode::None => format!(
            "run corral in a cgroup delegated to it: `systemd-run --user --scope -p Delegate=yes corral serve ...`, or a systemd unit with `Delegate=yes` (docs/isolation.md); or set `isolation.cgroup_parent` to a v2 cgroup corral's user may write whose parent enables `{name}` (`echo +{name} > .../cgroup.subtree_control`)"
        ),
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value} to {}: {e}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn ci() -> bool {
        std::env::var("CI").as_deref() == Ok("true")
    }

    /// This host's `pids` place; `None` (a skip, which fails under `CI=true` as root) without
    /// one. A normal user has no writable one here, so it skips then.
    fn pids_base() -> Option<PathBuf> {
        let root = rustix::process::geteuid().is_root();
        let base = detect(None).pids.map(|p| p.dir().to_path_buf());
        match base {
            Some(b) if root || try_create(&b, "pids.max").is_ok() => Some(b),
            _ => {
                assert!(
                    !(ci() && root),
                    "no pids cgroup corral can write here, as root, and CI=true"
                );
                eprintln!("notice: no pids cgroup this user can write; skipping");
                None
            }
        }
    }

    /// A fake cgroupfs: a temp dir mounted (in the fake mountinfo) as a unified hierarchy, with
    /// corral's own cgroup at `/app` offering `controllers` and enabling `enabled`.
    fn fake_v2(controllers: &str, enabled: &str) -> (tempfile::TempDir, String, String) {
        let root = tempfile::tempdir().unwrap();
        let app = root.path().join("app");
        std::fs::create_dir(&app).unwrap();
        std::fs::write(app.join("cgroup.controllers"), controllers).unwrap();
        std::fs::write(app.join("cgroup.subtree_control"), enabled).unwrap();
        std::fs::write(app.join("cgroup.type"), "domain").unwrap();
        let mountinfo = format!(
            "41 31 0:38 / {} rw,relatime - cgroup2 cgroup2 rw\n",
            root.path().display()
        );
        (root, mountinfo, "0::/app\n".to_owned())
    }

    #[test]
    fn a_delegated_v2_cgroup_gives_both_controllers_and_one_directory_per_run() {
        let (root, mountinfo, own) = fake_v2("cpu memory pids", "memory pids");
        let s = detect_in(&mountinfo, &own, None);
        let app = root.path().join("app");
        assert_eq!(s.mode, Mode::Unified);
        assert_eq!(s.pids, Some(Place::V2(app.clone())));
        assert_eq!(s.memory, Some(Place::V2(app.clone())));
        let mut run = RunCgroups::create(&s, "t1", 2, &[Controller::Pids])
            .map_err(|(e, _)| e)
            .unwrap();
        let dir = app.join("corral-t1");
        assert_eq!(run.dirs().collect::<Vec<_>>(), vec![dir.as_path()]);
        assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap(), "2");
        // Nothing is attested before the run's limits are written.
        assert_eq!(run.primitives().count(), 0);
        run.set_pids_max(66).unwrap();
        std::fs::write(dir.join("memory.swap.max"), "max").unwrap();
        run.set_memory_max(1 << 30).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap(), "66");
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.max")).unwrap(),
            "1073741824"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("memory.swap.max")).unwrap(),
            "0"
        );
        assert_eq!(
            run.primitives().collect::<Vec<_>>(),
            ["cgroup:pids", "cgroup:memory"]
        );
        // (A fake directory with files in it cannot be removed like a cgroup.)
        for f in ["pids.max", "memory.max", "memory.swap.max"] {
            std::fs::remove_file(dir.join(f)).unwrap();
        }
        assert!(run.remove(Duration::from_secs(1)));
        assert!(!dir.exists());
    }

    #[test]
    fn offered_but_not_enabled_v2_controllers_are_enabled_for_the_children() {
        let (root, mountinfo, own) = fake_v2("memory pids", "");
        let s = detect_in(&mountinfo, &own, None);
        let app = root.path().join("app");
        let written = std::fs::read_to_string(app.join("cgroup.subtree_control")).unwrap();
        // One write per controller (a real cgroupfs keeps both; the fake keeps the last).
        assert!(written.starts_with('+'), "{written}");
        assert!(s.v2.as_ref().unwrap().enabled.len() == 1);
        assert!(s.pids.is_some() || s.memory.is_some());
    }

    #[test]
    fn a_v2_cgroup_without_the_controllers_falls_back_to_v1_and_says_why() {
        let (root, mut mountinfo, mut own) = fake_v2("cpu io", "");
        let pids = root.path().join("pids");
        std::fs::create_dir(&pids).unwrap();
        mountinfo.push_str(&format!(
            "39 31 0:36 / {} rw,relatime - cgroup cgroup rw,pids\n",
            pids.display()
        ));
        own.push_str("8:pids:/\n");
        let s = detect_in(&mountinfo, &own, None);
        assert_eq!(s.mode, Mode::Hybrid);
        assert_eq!(s.pids, Some(Place::V1(pids.clone())));
        assert_eq!(s.memory, None);
        let note = s.v2.as_ref().unwrap().note.clone().unwrap();
        assert!(note.contains("`pids` and `memory` not delegated"), "{note}");
        let d = s.describe();
        assert!(d.starts_with("hybrid (v1 and v2)"), "{d}");
        assert!(d.contains("controllers cpu io"), "{d}");
        // A memory limit has nowhere to go: refused, with the fix.
        let (e, partial) = RunCgroups::create(&s, "t2", 2, &[Controller::Memory])
            .expect_err("no memory controller");
        assert!(e.contains("`memory`") && e.contains("Delegate=yes"), "{e}");
        assert!(partial.remove(Duration::from_secs(1)));
    }

    #[test]
    fn a_configured_parent_is_used_and_one_that_is_no_cgroup_is_reported() {
        let (root, mountinfo, own) = fake_v2("", "");
        let parent = root.path().join("delegated");
        std::fs::create_dir(&parent).unwrap();
        std::fs::write(parent.join("cgroup.controllers"), "pids memory").unwrap();
        std::fs::write(parent.join("cgroup.subtree_control"), "pids memory").unwrap();
        let s = detect_in(&mountinfo, &own, Some(&parent));
        assert_eq!(s.pids, Some(Place::V2(parent.clone())));
        assert!(s.v2.as_ref().unwrap().configured);
        assert!(s.describe().contains("isolation.cgroup_parent"));

        let s = detect_in(&mountinfo, &own, Some(&root.path().join("nope")));
        assert_eq!(s.pids, None);
        let e = s.parent_error.clone().unwrap();
        assert!(e.contains("not a cgroup v2 directory"), "{e}");
    }

    #[test]
    fn a_run_without_a_pids_place_is_refused_only_when_pids_is_required() {
        let (e, partial) =
            RunCgroups::create(&Support::default(), "t-nopids", 10, &[Controller::Pids])
                .expect_err("no pids hierarchy, no run");
        assert!(e.contains("`pids`"), "{e}");
        assert!(partial.dirs().next().is_none());
        let run = RunCgroups::create(&Support::default(), "t-nopids", 10, &[])
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(!run.has(Controller::Pids));
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
    fn a_memory_limit_without_a_memory_place_is_refused() {
        let Some(base) = pids_base() else { return };
        let support = Support {
            pids: Some(Place::V1(base)),
            ..Support::default()
        };
        let id = format!("t-nomem-{}", std::process::id());
        let (e, partial) =
            RunCgroups::create(&support, &id, 10, &[Controller::Pids, Controller::Memory])
                .expect_err("a memory limit without a memory hierarchy");
        assert!(e.contains("`memory`"), "{e}");
        // The pids cgroup made on the way is handed back, and removable.
        assert!(partial.has(Controller::Pids));
        assert!(partial.remove(Duration::from_secs(1)));
        // Without a memory limit the same support makes a run's cgroups.
        let run = RunCgroups::create(&support, &id, 10, &[Controller::Pids])
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(run.has(Controller::Pids) && !run.has(Controller::Memory));
        assert!(run.remove(Duration::from_secs(1)));
    }

    /// The real unified hierarchy this host mounts (as root: a normal user may write none of
    /// it). Creation, joining by writing `0` to `cgroup.procs` (what the helper does) and
    /// `cgroup.kill` work there without any controller.
    #[test]
    fn a_v2_cgroup_on_the_real_unified_hierarchy_is_joined_and_killed() {
        let Some(mount) = detect(None).v2_mount else {
            assert!(!ci(), "no unified hierarchy mounted and CI=true");
            eprintln!("notice: no unified hierarchy mounted; skipping");
            return;
        };
        if !rustix::process::geteuid().is_root() {
            eprintln!("notice: this test needs root (it writes the unified hierarchy); skipping");
            return;
        }
        let dir = mount.join(format!("corral-test-{}", std::process::id()));
        let group = Group::make(dir.clone(), true).unwrap();
        let procs = dir.join("cgroup.procs");
        let mut child = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "echo 0 > {} && echo joined && exec sleep 60",
                procs.display()
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "joined\n");
        let members = std::fs::read_to_string(&procs).unwrap();
        assert_eq!(members.trim(), child.id().to_string());
        assert!(!group.empty());
        // Removal kills what is left with cgroup.kill, then removes the directory.
        assert!(group.remove(Instant::now() + Duration::from_secs(5)));
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(!dir.exists());
    }
}
