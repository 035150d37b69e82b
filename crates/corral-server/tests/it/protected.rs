//! Corral's own files through a real server: a symlinked config directory (issue 11 item 3)
//! and the agent rewriting its own policy (item 4).

use std::os::unix::fs::symlink;

use serde_json::json;

use crate::common::Server;

/// `DIR/real` is the root, holding corral.yaml; `DIR/link -> real`; the config is loaded as
/// `DIR/link/corral.yaml`, so its state dir is `link/.corral`, really `real/.corral`.
fn symlinked_config(dir: &std::path::Path, rules: &str) -> corral_config::Loaded {
    let real = dir.join("real");
    std::fs::create_dir_all(real.join("out")).unwrap();
    symlink(&real, dir.join("link")).unwrap();
    std::fs::write(
        real.join("corral.yaml"),
        format!("version: 1\nroot: {}\n{rules}", real.display()),
    )
    .unwrap();
    corral_config::load_file(&dir.join("link/corral.yaml")).unwrap()
}

#[tokio::test]
async fn a_symlinked_config_directory_leaves_no_state_or_config_readable() {
    // issue 11 item 3: the state dir was recorded as `link/.corral` while the file ops
    // compared real paths, so `.corral/corral.db` could be listed and downloaded.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let loaded = symlinked_config(&dir, "preset: files_readonly\n");
    let s = Server::start(&loaded).await;
    let real = dir.join("real");
    std::fs::write(real.join("notes.txt"), "hi").unwrap();
    s.call("files.read", json!({"path": real.join("notes.txt")}))
        .await
        .ok();
    assert!(
        real.join(".corral/corral.db").exists(),
        "the store lives in real/.corral"
    );
    for (op, p) in [
        ("files.list", real.join(".corral")),
        ("files.download", real.join(".corral/corral.db")),
        ("files.read", real.join(".corral/corral.db")),
        ("files.stat", real.join(".corral/corral.db-shm")),
        ("files.read", real.join("corral.yaml")),
    ] {
        let r = s.call(op, json!({ "path": p })).await;
        r.assert_error(403, "policy.path_denied");
        // The fix never says to widen the scope past a protected location.
        assert!(!r.text.contains("widen"), "{}", r.text);
    }
    // The root itself is still listed.
    let listed = s.call("files.list", json!({"path": real})).await.ok();
    assert!(
        listed["entries"].as_array().is_some_and(|e| !e.is_empty()),
        "{listed}"
    );
}

#[tokio::test]
async fn the_agent_cannot_rewrite_corrals_config() {
    // issue 11 item 4: an agent edited corral.yaml (in a root it could write) to add a
    // `sh -c ...` rule, and had a shell after SIGHUP. Such a config no longer loads; and a
    // path that leads to the config through a symlink is refused on its real path.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let real = dir.join("real");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::write(
        real.join("corral.yaml"),
        format!(
            "version: 1\nroot: {}\nstate_dir: {}\nenable: [files.read, files.write]\n",
            real.display(),
            dir.join("state").display()
        ),
    )
    .unwrap();
    let e = corral_config::load_file(&real.join("corral.yaml")).unwrap_err();
    assert!(
        e.render().contains("config.protected_writable") && e.render().contains("the config file"),
        "{}",
        e.render()
    );

    let loaded = symlinked_config(
        &dir.join("b"),
        &format!(
            "rules:\n  - allow: [files.read]\n    paths: {{roots: [{0}/b/real]}}\n  - allow: [files.write]\n    confirm: never\n    paths: {{roots: [{0}/b/real/out], symlinks: follow, unsafe: true}}\n",
            dir.display()
        ),
    );
    let s = Server::start(&loaded).await;
    let real = dir.join("b/real");
    symlink(real.join("corral.yaml"), real.join("out/cfg")).unwrap();
    let before = std::fs::read_to_string(real.join("corral.yaml")).unwrap();
    let r = s
        .call(
            "files.write",
            json!({"path": real.join("out/cfg"), "content": "rules: [{allow: [commands.run]}]\n"}),
        )
        .await;
    r.assert_error(403, "policy.path_denied");
    assert_eq!(
        std::fs::read_to_string(real.join("corral.yaml")).unwrap(),
        before
    );
    // Writing elsewhere in that root works.
    s.call(
        "files.write",
        json!({"path": real.join("out/ok.txt"), "content": "x"}),
    )
    .await
    .ok();
}
