//! `corral doctor` on this host, as root and as a normal user (CI runs this binary as both): the
//! cgroup layout, what bounds a run's processes, and that the linux backend can run.

use std::os::unix::fs::MetadataExt;

use crate::{corral, workspace};

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn doctor_json(dir: &std::path::Path) -> (i32, serde_json::Value, String) {
    let (code, out, err) = corral(dir, &["doctor", "--format", "json"]);
    let parsed = serde_json::from_str(&out);
    let Ok(v) = parsed else {
        unreachable!("doctor prints JSON: {parsed:?}: {out}\n{err}")
    };
    (code, v, err)
}

fn primitive<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["primitives"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| unreachable!("doctor lists `{name}`: {v}"))
}

// issue 12 items 1 and 2: a normal user without a writable cgroup is no longer refused (RLIMIT_NPROC
// in the run's user namespace bounds its processes), and doctor names the cgroup layout.
#[test]
fn doctor_names_the_cgroup_layout_and_what_bounds_a_runs_processes() {
    let dir = workspace(None);
    let (code, v, err) = doctor_json(dir.path());
    assert_eq!(code, 0, "the linux backend can run here: {v}\n{err}");
    let cgroup = primitive(&v, "cgroup");
    let detail = cgroup["detail"].as_str().unwrap_or_default();
    assert!(
        ["v1", "v2 (unified)", "hybrid (v1 and v2)", "none mounted"]
            .iter()
            .any(|m| detail.starts_with(m)),
        "the layout is named: {detail}"
    );
    let pids = primitive(&v, "cgroup:pids");
    let nproc = primitive(&v, "rlimit:nproc-userns");
    let limit = if is_root() {
        // Root: RLIMIT_NPROC never binds host uid 0, so the pids cgroup bounds a run; with host
        // ids (the default, `isolation.host_uids: auto`) the program is an unprivileged uid,
        // which RLIMIT_NPROC binds too.
        assert_eq!(pids["required"], true, "{pids}");
        assert_eq!(nproc["available"], true, "{nproc}");
        assert!(
            nproc["detail"]
                .as_str()
                .is_some_and(|d| d.contains("host_uids")),
            "{nproc}"
        );
        let root_dir = workspace(Some(
            "version: 1\nroot: $WS\nisolation: {host_uids: root}\n",
        ));
        let (code, v, err) = doctor_json(root_dir.path());
        assert_eq!(code, 0, "{v}\n{err}");
        let nproc = primitive(&v, "rlimit:nproc-userns");
        assert_eq!(nproc["available"], false, "as host root itself: {nproc}");
        "cgroup:pids"
    } else {
        assert_eq!(nproc["available"], true, "{nproc}");
        assert_eq!(pids["required"], false, "{pids}");
        "rlimit:nproc-userns"
    };
    let linux = &v["backends"][0];
    assert_eq!(linux["name"], "linux");
    assert_eq!(linux["can_run"], true, "{linux}");
    assert!(
        linux["detail"].as_str().is_some_and(|d| d.contains(limit)),
        "the test run attests {limit}: {linux}"
    );
}

// issue 12 item 1: `isolation.cgroup_parent` is what doctor looks at; one that is no cgroup is
// named as such.
#[test]
fn doctor_says_when_the_configured_cgroup_parent_is_no_cgroup() {
    let dir = workspace(Some(
        "version: 1\nroot: $WS\nisolation: {cgroup_parent: /nonexistent/corral.slice}\n",
    ));
    let (_, v, err) = doctor_json(dir.path());
    let detail = primitive(&v, "cgroup")["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains("isolation.cgroup_parent") && detail.contains("not a cgroup v2 directory"),
        "{detail}\n{err}"
    );
}

// issue 21 item 1: in a container, doctor says so and how it told (here: the `container`
// variable, which podman and systemd-nspawn set), so its fixes are the container's.
#[test]
fn doctor_names_the_container_it_runs_in() {
    let dir = workspace(None);
    let (_, out, err) = crate::corral_with_env(
        dir.path(),
        &["doctor", "--format", "json"],
        &[("container", "corral-test")],
    );
    let v: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| unreachable!("doctor prints JSON: {e}: {out}\n{err}"));
    assert_eq!(
        v["container"], "corral-test: the `container` variable says so",
        "{v}"
    );
    let procfs = primitive(&v, "procfs");
    assert_eq!(procfs["required"], true, "{procfs}");
    let (_, human, _) =
        crate::corral_with_env(dir.path(), &["doctor"], &[("container", "corral-test")]);
    assert!(human.starts_with("in a container: corral-test"), "{human}");
}
