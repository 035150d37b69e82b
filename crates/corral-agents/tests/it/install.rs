//! The install manager, with a stand-in `npm` (a shell script laying out what the real package
//! would), in each mode.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use corral_agents::install::{self, InstallMode, InstallStatus, Installer, RECORD};
use corral_agents::{Adapter, codes};

/// An `npm` that, asked to `install --prefix DIR PKG@VER`, waits `delay` seconds, appends its
/// arguments to `log`, and lays out codex's binary under DIR (or fails when `fail` exists).
fn fake_npm(dir: &Path, delay: u32) -> PathBuf {
    let npm = dir.join("npm");
    let bin = install::program(Adapter::Codex, Path::new("$prefix"));
    let script = format!(
        "#!/bin/sh\nprefix=\"$3\"\nsleep {delay}\necho \"$@\" >> {log}\n[ -e {fail} ] && {{ echo 'npm ERR! 404 \x1b[31mnot found' >&2; exit 1; }}\nmkdir -p \"$(dirname \"{bin}\")\"\necho '#!/bin/sh' > \"{bin}\"\n",
        log = dir.join("log").display(),
        fail = dir.join("fail").display(),
        bin = bin[0],
    );
    std::fs::write(&npm, script).unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    npm
}

fn installer(state: &Path, mode: InstallMode, delay: u32) -> Arc<Installer> {
    Arc::new(Installer::new(state, mode).with_npm(fake_npm(state, delay)))
}

async fn wait_installed(i: &Installer) {
    for _ in 0..100 {
        if matches!(i.status(Adapter::Codex), InstallStatus::Installed { .. }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the lazy install never finished: {:?}",
        i.status(Adapter::Codex)
    );
}

#[tokio::test]
async fn a_lazy_install_answers_retry_later_then_runs_the_pinned_version_from_the_state_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let i = installer(tmp.path(), InstallMode::Lazy, 1);
    let first = i.ensure(Adapter::Codex).unwrap_err();
    assert_eq!(first.code, codes::AGENTS_INSTALLING);
    assert_eq!(first.retry_after, Some(install::RETRY_AFTER));
    assert!(
        first.message.contains("retry after 30 s"),
        "{}",
        first.message
    );
    // Asked again while it runs: the same answer, and no second npm.
    assert_eq!(
        i.ensure(Adapter::Codex).unwrap_err().code,
        codes::AGENTS_INSTALLING
    );
    assert_eq!(i.status(Adapter::Codex), InstallStatus::Installing);
    wait_installed(&i).await;
    let got = i.ensure(Adapter::Codex).unwrap();
    let dir = tmp
        .path()
        .join("agents/codex")
        .join(install::pin(Adapter::Codex).version);
    assert_eq!(got.dir, dir);
    assert!(got.program[0].starts_with(&*dir.to_string_lossy()));
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(RECORD)).unwrap()).unwrap();
    assert_eq!(record["package"], "@openai/codex");
    assert_eq!(record["version"], install::pin(Adapter::Codex).version);
    let log = std::fs::read_to_string(tmp.path().join("log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(
        log.contains("--prefix") && log.contains("@openai/codex@0.171.0") && !log.contains("-g"),
        "{log}"
    );
    // Nothing of the temporary directory is left.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("agents/codex"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("0.171.0")]);
}

#[tokio::test]
async fn a_failed_install_is_reported_once_with_npms_words_cleaned_then_tried_again() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("fail"), "").unwrap();
    let i = installer(tmp.path(), InstallMode::Lazy, 0);
    assert_eq!(
        i.ensure(Adapter::Codex).unwrap_err().code,
        codes::AGENTS_INSTALLING
    );
    let mut failed = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        match i.ensure(Adapter::Codex) {
            Err(e) if e.code == codes::AGENTS_INSTALL_FAILED => {
                failed = Some(e);
                break;
            }
            _ => {}
        }
    }
    let e = failed.expect("the failure is reported");
    assert!(
        e.message.contains("npm ERR! 404 ?[31mnot found"),
        "{}",
        e.message
    );
    assert!(matches!(
        i.status(Adapter::Codex),
        InstallStatus::Missing { .. } | InstallStatus::Installing
    ));
    std::fs::remove_file(tmp.path().join("fail")).unwrap();
    assert_eq!(
        i.ensure(Adapter::Codex).unwrap_err().code,
        codes::AGENTS_INSTALLING
    );
    wait_installed(&i).await;
}

#[tokio::test]
async fn build_mode_refuses_a_missing_cli_and_names_the_prepare_command_that_installs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let i = installer(tmp.path(), InstallMode::Build, 0);
    let e = i.ensure(Adapter::Codex).unwrap_err();
    assert_eq!(e.code, codes::AGENTS_NOT_INSTALLED);
    assert!(
        e.message.contains("corral agents prepare codex"),
        "{}",
        e.message
    );
    assert_eq!(
        i.status(Adapter::Codex),
        InstallStatus::Missing {
            fix: "corral agents prepare codex".into()
        }
    );
    assert!(
        !tmp.path().join("log").exists(),
        "build mode downloaded on use"
    );
    i.prepare(Adapter::Codex).await.unwrap();
    assert!(i.ensure(Adapter::Codex).is_ok());
    assert!(
        matches!(i.status(Adapter::Codex), InstallStatus::Installed { version, .. } if version == "0.171.0")
    );
}

#[tokio::test]
async fn offline_mode_uses_what_is_there_and_never_downloads() {
    let tmp = tempfile::tempdir().unwrap();
    let offline = installer(tmp.path(), InstallMode::Offline, 0);
    assert_eq!(
        offline.ensure(Adapter::Codex).unwrap_err().code,
        codes::AGENTS_NOT_INSTALLED
    );
    assert_eq!(
        offline.prepare(Adapter::Codex).await.unwrap_err().code,
        codes::AGENTS_NOT_INSTALLED
    );
    assert!(!tmp.path().join("log").exists(), "offline mode ran npm");
    installer(tmp.path(), InstallMode::Build, 0)
        .prepare(Adapter::Codex)
        .await
        .unwrap();
    assert!(offline.ensure(Adapter::Codex).is_ok());
}

#[tokio::test]
async fn off_mode_refuses_even_an_installed_cli() {
    let tmp = tempfile::tempdir().unwrap();
    installer(tmp.path(), InstallMode::Build, 0)
        .prepare(Adapter::Codex)
        .await
        .unwrap();
    let off = installer(tmp.path(), InstallMode::Off, 0);
    let e = off.ensure(Adapter::Codex).unwrap_err();
    assert_eq!(e.code, codes::AGENTS_INSTALL_OFF);
    assert!(e.message.contains("install: {mode: lazy}"), "{}", e.message);
}

#[tokio::test]
async fn a_second_prepare_while_one_runs_is_told_to_retry_instead_of_installing_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let i = installer(tmp.path(), InstallMode::Build, 1);
    let (a, b) = tokio::join!(i.prepare(Adapter::Codex), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        i.prepare(Adapter::Codex).await
    });
    assert!(a.is_ok(), "{a:?}");
    assert_eq!(b.unwrap_err().code, codes::AGENTS_INSTALLING);
    let log = std::fs::read_to_string(tmp.path().join("log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
}

#[test]
fn a_record_of_another_version_is_not_an_install() {
    let tmp = tempfile::tempdir().unwrap();
    let i = Installer::new(tmp.path(), InstallMode::Offline);
    let dir = i.dir(Adapter::Codex);
    let bin = install::program(Adapter::Codex, &dir);
    std::fs::create_dir_all(Path::new(&bin[0]).parent().unwrap()).unwrap();
    std::fs::write(&bin[0], "").unwrap();
    std::fs::write(
        dir.join(RECORD),
        r#"{"package":"@openai/codex","version":"0.1.0"}"#,
    )
    .unwrap();
    assert!(i.installed(Adapter::Codex).is_none());
    assert!(matches!(
        i.status(Adapter::Codex),
        InstallStatus::Missing { .. }
    ));
}
