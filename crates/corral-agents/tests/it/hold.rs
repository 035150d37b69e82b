//! A hold's directory read into entries and built back (`corral_agents::hold`): what the store
//! keeps of a turn's held changes, and how an apply on any replica gets them back. The bytes
//! are an agent's: nothing here follows a symlink, opens a fifo or writes outside the tree.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use corral_agents::codes;
use corral_agents::hold::{HoldBuilder, HoldReader};
use corral_ports::holds::{HeldEntry, HeldKind, HeldPath, MAX_HOLD_BYTES};

fn read(dir: &Path) -> Vec<(HeldKind, String, u32, Vec<u8>)> {
    HoldReader::new(dir)
        .map(|e| {
            let e = e.unwrap();
            (
                e.kind(),
                e.path().to_string(),
                e.mode(),
                e.content().to_vec(),
            )
        })
        .collect()
}

fn read_err(dir: &Path) -> corral_agents::AgentError {
    HoldReader::new(dir)
        .find_map(Result::err)
        .expect("the hold is refused")
}

fn mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A hold as the copy-on-write layer writes one.
fn layer_hold(root: &Path) {
    let c = root.join("content");
    std::fs::create_dir_all(c.join("docs/ro")).unwrap();
    std::fs::write(c.join("docs/README.md"), b"held\0\xff").unwrap();
    std::fs::write(c.join("run.sh"), "#!/bin/sh\n").unwrap();
    mode(&c.join("run.sh"), 0o4755);
    std::os::unix::fs::symlink("/etc/passwd", c.join("docs/passwd")).unwrap();
    std::fs::write(c.join("docs/ro/x"), "x").unwrap();
    mode(&c.join("docs/ro"), 0o555);
    std::fs::create_dir_all(root.join("delete/gone")).unwrap();
    std::fs::write(root.join("delete/gone/old.txt"), "").unwrap();
    std::os::unix::fs::symlink("anything", root.join("delete/link")).unwrap();
}

#[test]
fn a_hold_reads_into_entries_and_builds_back_the_same_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let hold = tmp.path().join("hold");
    layer_hold(&hold);
    let entries = read(&hold);
    let shown: Vec<(HeldKind, &str, u32)> = entries
        .iter()
        .map(|(k, p, m, _)| (*k, p.as_str(), *m))
        .collect();
    assert_eq!(
        shown,
        [
            (HeldKind::Dir, "docs", 0o755),
            (HeldKind::File, "docs/README.md", 0o644),
            (HeldKind::Symlink, "docs/passwd", 0o777),
            (HeldKind::Dir, "docs/ro", 0o555),
            (HeldKind::File, "docs/ro/x", 0o644),
            // The set-id bit is gone.
            (HeldKind::File, "run.sh", 0o755),
            (HeldKind::Delete, "gone/old.txt", 0o644),
            (HeldKind::Delete, "link", 0o777),
        ]
    );
    // A symlink is kept as its target, never followed.
    assert_eq!(entries[2].3, b"/etc/passwd");
    assert_eq!(entries[1].3, b"held\0\xff");

    let mut b = HoldBuilder::new(&tmp.path().join("rebuilt")).unwrap();
    for (kind, path, m, content) in &entries {
        let e = HeldEntry::new(*kind, HeldPath::new(path).unwrap(), *m, content.clone());
        b.push(&e.unwrap()).unwrap();
    }
    let rebuilt = b.finish().unwrap();
    let meta = std::fs::symlink_metadata(&rebuilt).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o700);
    let again = read(&rebuilt);
    // Gone whole, its read-only directory too.
    let copy = tmp.path().join("copy");
    let mut b = HoldBuilder::new(&copy).unwrap();
    for e in HoldReader::new(&rebuilt) {
        b.push(&e.unwrap()).unwrap();
    }
    corral_agents::hold::remove_hold_dir(&b.finish().unwrap()).unwrap();
    assert!(!copy.exists());
    corral_agents::hold::remove_hold_dir(&copy).unwrap();
    // The same entries, but a deletion marker is a file now (its kind is what counts).
    let strip = |v: &[(HeldKind, String, u32, Vec<u8>)]| -> Vec<(HeldKind, String, Vec<u8>)> {
        v.iter()
            .map(|(k, p, _, c)| (*k, p.clone(), c.clone()))
            .collect()
    };
    assert_eq!(strip(&again), strip(&entries));
    assert_eq!(
        again
            .iter()
            .filter(|e| e.0 != HeldKind::Delete)
            .map(|e| e.2)
            .collect::<Vec<_>>(),
        [0o755, 0o644, 0o777, 0o555, 0o644, 0o755]
    );
}

#[test]
fn a_hold_holding_a_fifo_or_a_name_that_is_not_text_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    std::fs::create_dir_all(fifo.join("content")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(fifo.join("content/pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    // Reading it would block forever; it is refused instead.
    let e = read_err(&fifo);
    assert_eq!(e.code, codes::AGENTS_HOLD_INVALID, "{e}");
    assert!(e.message.contains("`pipe`"), "{e}");

    let latin1 = tmp.path().join("latin1");
    std::fs::create_dir_all(latin1.join("content")).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9");
    std::fs::write(latin1.join("content").join(name), "x").unwrap();
    let e = read_err(&latin1);
    assert_eq!(e.code, codes::AGENTS_HOLD_INVALID, "{e}");
    assert!(e.message.contains("not UTF-8"), "{e}");
}

#[test]
fn a_hold_over_the_cap_is_refused_before_its_content_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let hold = tmp.path().join("hold");
    std::fs::create_dir_all(hold.join("content")).unwrap();
    std::fs::write(hold.join("content/a"), "a").unwrap();
    // Sparse: its size counts, its blocks cost nothing.
    let big = std::fs::File::create(hold.join("content/b")).unwrap();
    big.set_len(MAX_HOLD_BYTES).unwrap();
    let e = read_err(&hold);
    assert_eq!(e.code, codes::AGENTS_HOLD_TOO_LARGE, "{e}");
}

fn entry(kind: HeldKind, path: &str, content: &[u8]) -> HeldEntry {
    HeldEntry::new(kind, HeldPath::new(path).unwrap(), 0o644, content.to_vec()).unwrap()
}

#[test]
fn building_never_writes_through_a_held_symlink_or_over_an_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = target.to_string_lossy().into_owned();
    for (i, second) in [
        // Beneath a symlink the hold holds (to a directory outside it).
        entry(HeldKind::File, "a/planted", b"x"),
        entry(HeldKind::Dir, "a/dir", b""),
        entry(HeldKind::Delete, "x", b""),
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = HoldBuilder::new(&tmp.path().join(format!("h{i}"))).unwrap();
        b.push(&entry(HeldKind::Symlink, "a", link.as_bytes()))
            .unwrap();
        b.push(&entry(HeldKind::File, "x", b"")).unwrap();
        b.push(
            &HeldEntry::new(HeldKind::Delete, HeldPath::new("x").unwrap(), 0, Vec::new()).unwrap(),
        )
        .unwrap();
        let e = b.push(&second).unwrap_err();
        if second.kind() == HeldKind::Delete {
            assert!(e.message.contains("twice"), "{e}");
        } else {
            assert!(e.message.contains("not a directory"), "{e}");
        }
        assert_eq!(e.code, codes::AGENTS_HOLD_INVALID, "{e}");
    }
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    // Twice the same file, or a file beneath a file.
    let mut b = HoldBuilder::new(&tmp.path().join("dup")).unwrap();
    b.push(&entry(HeldKind::File, "f", b"1")).unwrap();
    let twice = b.push(&entry(HeldKind::File, "f", b"2")).unwrap_err();
    assert_eq!(twice.code, codes::AGENTS_HOLD_INVALID, "{twice}");
    let beneath = b.push(&entry(HeldKind::File, "f/g", b"3")).unwrap_err();
    assert_eq!(beneath.code, codes::AGENTS_HOLD_INVALID, "{beneath}");
    // The builder's directory must be fresh.
    let taken = HoldBuilder::new(&tmp.path().join("dup")).unwrap_err();
    assert_eq!(taken.code, codes::AGENTS_SANDBOX, "{taken}");
}
