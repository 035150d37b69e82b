//! Corral's own files: resolved, protected from every op, and refused inside a writable root
//! (issue 11 items 3 and 4); the `protected:` list.

use std::os::unix::fs::symlink;

use corral_config::load_file;
use corral_policy::{Args, Principal, Request, codes};

fn decide(l: &corral_config::Loaded, op: &str, path: &str) -> corral_policy::Decision {
    let args = Args::new().str("path", path).str("content", "x");
    l.engine().decide(&Request {
        op,
        principal: &Principal::anonymous(),
        args: &args,
    })
}

fn codes_of(e: &corral_config::LoadError) -> Vec<&'static str> {
    e.diagnostics.iter().map(|d| d.code).collect()
}

#[test]
fn a_config_file_inside_a_writable_root_does_not_load() {
    // issue 11 item 4: the agent rewrites its own policy (corral.yaml in a writable root).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let text = format!(
        "version: 1\nroot: {}\nstate_dir: {}\nenable: [files.read, files.write]\n",
        root.display(),
        dir.path().join("state").display()
    );
    std::fs::write(root.join("corral.yaml"), &text).unwrap();
    let e = load_file(&root.join("corral.yaml")).err().unwrap();
    assert_eq!(
        codes_of(&e),
        [codes::CONFIG_PROTECTED_WRITABLE],
        "{}",
        e.render()
    );
    assert!(e.render().contains("the config file"), "{}", e.render());
    // Beside the workspace it loads, and no op may read or write it.
    std::fs::write(dir.path().join("corral.yaml"), &text).unwrap();
    let l = load_file(&dir.path().join("corral.yaml")).unwrap();
    let cfg = dir.path().join("corral.yaml").display().to_string();
    assert_eq!(
        decide(&l, "files.read", &cfg).code(),
        Some(codes::POLICY_PATH_OUTSIDE_SCOPE)
    );
}

#[test]
fn a_jwt_key_file_inside_a_writable_root_does_not_load() {
    // issue 11 item 4: key files are protected like the config.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ws")).unwrap();
    std::fs::write(
        dir.path().join("ws/jwt.pem"),
        "-----BEGIN PUBLIC KEY-----\n",
    )
    .unwrap();
    let text = format!(
        "version: 1\nroot: {0}/ws\nenable: [files.write]\nauth:\n  jwt: {{rs256_public_key_file: {0}/ws/jwt.pem}}\n",
        dir.path().display()
    );
    std::fs::write(dir.path().join("corral.yaml"), &text).unwrap();
    let e = load_file(&dir.path().join("corral.yaml")).err().unwrap();
    assert!(
        codes_of(&e).contains(&codes::CONFIG_PROTECTED_WRITABLE),
        "{}",
        e.render()
    );
    assert!(
        e.render().contains("rs256_public_key_file"),
        "{}",
        e.render()
    );
}

#[test]
fn a_symlinked_config_directory_protects_the_real_state_directory() {
    // issue 11 item 3: `--config DIR/link/corral.yaml` with `link -> real` and the root `real`.
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join(".corral")).unwrap();
    symlink(&real, dir.path().join("link")).unwrap();
    let text = format!(
        "version: 1\nroot: {}\npreset: files_readonly\n",
        real.display()
    );
    std::fs::write(real.join("corral.yaml"), &text).unwrap();
    let l = load_file(&dir.path().join("link/corral.yaml")).unwrap();
    let real_state = std::fs::canonicalize(real.join(".corral")).unwrap();
    assert_eq!(l.state_dir, real_state);
    let db = real_state.join("corral.db").display().to_string();
    assert_eq!(
        decide(&l, "files.read", &db).code(),
        Some(codes::POLICY_PATH_DENIED)
    );
    let cfg = std::fs::canonicalize(real.join("corral.yaml")).unwrap();
    assert_eq!(
        decide(&l, "files.read", &cfg.display().to_string()).code(),
        Some(codes::POLICY_PATH_DENIED)
    );
    // Writable, the same layout does not load: the state dir is inside the root, resolved.
    std::fs::write(
        real.join("corral.yaml"),
        text.replace("preset: files_readonly", "enable: [files.write]"),
    )
    .unwrap();
    let e = load_file(&dir.path().join("link/corral.yaml"))
        .err()
        .unwrap();
    assert!(
        codes_of(&e).contains(&codes::CONFIG_PROTECTED_WRITABLE),
        "{}",
        e.render()
    );
}

#[test]
fn the_protected_list_refuses_changes_and_leaves_reads_to_the_policy() {
    let l = crate::load(
        "version: 1\nroot: /ws\nstate_dir: /var/lib/corral\nenable: [files.read, files.write]\nprotected: [\"*.lock\", /ws/ci]\n",
    );
    for p in [
        "/ws/Cargo.lock",
        "/ws/a/b.lock",
        "/ws/ci/run.sh",
        "/ws/.git/config",
    ] {
        assert_eq!(
            decide(&l, "files.write", p).code(),
            Some(codes::POLICY_PATH_DENIED),
            "{p}"
        );
        assert!(decide(&l, "files.read", p).is_allowed(), "{p}");
    }
    assert!(decide(&l, "files.write", "/ws/src/main.rs").is_allowed());
    let e = crate::load_err("corral.yaml", "version: 1\nprotected: [\"[unclosed\"]\n");
    assert_eq!(
        codes_of(&e),
        [codes::CONFIG_INVALID_SCOPE],
        "{}",
        e.render()
    );
}
