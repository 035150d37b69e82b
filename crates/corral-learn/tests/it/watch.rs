//! The watcher: reload on change, keep the last good manifest, grace for values that left.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use corral_learn::manifest::IssueKind;
use corral_learn::watch::{ManualClock, Watcher};
use serde_json::{Value as J, json};

use crate::manifest::good;

struct Lab {
    _dir: tempfile::TempDir,
    path: PathBuf,
    clock: Arc<ManualClock>,
    watcher: Watcher,
}

/// Writes like the lab's seeder: a temp file in the same directory, then rename.
fn write_atomically(path: &Path, doc: &J) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn lab(grace: Duration) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.json");
    write_atomically(&path, &good());
    let clock = Arc::new(ManualClock::new());
    let watcher = Watcher::open(&path, grace, clock.clone()).unwrap();
    Lab {
        _dir: dir,
        path,
        clock,
        watcher,
    }
}

fn reseeded(scenario: &str, value: J) -> J {
    let mut doc = good();
    doc["scenario_id"] = json!(scenario);
    doc["targets"][0]["value"] = value;
    doc
}

#[test]
fn an_invalid_manifest_at_startup_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifest.json");
    let mut doc = good();
    doc["targets"] = json!([]);
    std::fs::write(&path, doc.to_string()).unwrap();
    let err =
        Watcher::open(&path, Duration::from_secs(1), Arc::new(ManualClock::new())).unwrap_err();
    assert_eq!(err.issues[0].kind, IssueKind::NoTargets);
}

#[test]
fn an_atomic_replace_is_in_force_on_the_next_call() {
    let lab = lab(Duration::from_secs(3600));
    assert!(lab.watcher.current().matcher().is_match("lag is 5100"));
    write_atomically(&lab.path, &reseeded("kafka-lag-8b4c", json!(7300)));
    let now = lab.watcher.current();
    assert_eq!(now.manifest().scenario_id, "kafka-lag-8b4c");
    assert!(now.matcher().is_match("lag is 7,300"));
    assert_eq!(lab.watcher.errors_total(), 0);
}

#[test]
fn an_in_place_rewrite_is_seen_too() {
    // A different size, so the check does not depend on the file system's mtime granularity
    // (an in-place rewrite of the same size within one tick is what atomic writes avoid).
    let lab = lab(Duration::ZERO);
    std::fs::write(
        &lab.path,
        reseeded("kafka-lag-7f3a", json!(52_000)).to_string(),
    )
    .unwrap();
    let now = lab.watcher.current();
    assert!(now.matcher().is_match("52,000"));
    assert!(!now.matcher().is_match("5100"), "no grace configured");
}

#[test]
fn an_invalid_reload_keeps_the_last_good_manifest_and_counts_once() {
    let lab = lab(Duration::from_secs(3600));
    let mut bad = reseeded("kafka-lag-8b4c", json!(7300));
    bad["targets"][0]["value"] = json!(3);
    write_atomically(&lab.path, &bad);
    let refresh = lab.watcher.check();
    assert_eq!(refresh.snapshot.manifest().scenario_id, "kafka-lag-7f3a");
    assert!(refresh.snapshot.matcher().is_match("5100"));
    let err = refresh.error.unwrap();
    assert_eq!(err.issues[0].kind, IssueKind::NumberTooSmall);
    assert_eq!(lab.watcher.errors_total(), 1);
    // The same broken file is not counted again on every call.
    assert!(lab.watcher.check().error.is_none());
    assert_eq!(lab.watcher.errors_total(), 1);
    // A removed file is a failed reload too, and the old manifest still guards.
    std::fs::remove_file(&lab.path).unwrap();
    assert!(lab.watcher.check().error.is_some());
    assert_eq!(lab.watcher.errors_total(), 2);
    assert!(lab.watcher.current().matcher().is_match("5,100"));
    // A good file again is taken.
    write_atomically(&lab.path, &reseeded("kafka-lag-9d5e", json!(8800)));
    assert_eq!(
        lab.watcher.current().manifest().scenario_id,
        "kafka-lag-9d5e"
    );
}

#[test]
fn values_that_leave_the_manifest_stay_guarded_through_the_grace_period() {
    let lab = lab(Duration::from_secs(3600));
    write_atomically(&lab.path, &reseeded("kafka-lag-8b4c", json!(7300)));
    let now = lab.watcher.current();
    assert!(now.matcher().is_match("the old lag was 5,100"));
    assert!(now.matcher().is_match("7300"));
    let graced = now
        .guarded()
        .iter()
        .find(|g| g.target.id == "total_lag" && g.scenario_id == "kafka-lag-7f3a")
        .unwrap();
    assert!(graced.until.is_some());
    lab.clock.advance(Duration::from_secs(3599));
    assert!(lab.watcher.current().matcher().is_match("5100"));
    lab.clock.advance(Duration::from_secs(1));
    let later = lab.watcher.current();
    assert!(!later.matcher().is_match("5100"));
    assert!(later.matcher().is_match("7300"));
    assert!(
        later.matcher().is_match("orders-7"),
        "a value still in the manifest stays"
    );
}

#[test]
fn a_graced_value_keeps_its_own_deadline_across_a_second_reseed() {
    let lab = lab(Duration::from_secs(100));
    write_atomically(&lab.path, &reseeded("s-2", json!(7300)));
    assert!(lab.watcher.current().matcher().is_match("5100"));
    lab.clock.advance(Duration::from_secs(60));
    write_atomically(&lab.path, &reseeded("s-3", json!(8800)));
    let now = lab.watcher.current();
    assert!(now.matcher().is_match("5100") && now.matcher().is_match("7300"));
    lab.clock.advance(Duration::from_secs(40));
    let now = lab.watcher.current();
    assert!(
        !now.matcher().is_match("5100"),
        "5100's grace ended at 100 s"
    );
    assert!(now.matcher().is_match("7300"), "7300's runs to 160 s");
}
