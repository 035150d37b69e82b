//! The group-commit `AuditWriter`: concurrent appends share commits, each caller still learns
//! its own event's fate, and a bad event does not fail its neighbours.

use std::sync::Arc;

use corral_ports::audit::AuditSink;
use corral_store::{AuditWriter, Store};

use crate::common::event;

async fn fresh() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&Store::default_sqlite_url(dir.path()))
        .await
        .unwrap();
    (dir, store)
}

#[tokio::test]
async fn ten_thousand_appends_from_32_tasks_through_the_writer_land_exactly_once() {
    let (_dir, store) = fresh().await;
    let writer = Arc::new(AuditWriter::spawn(store.clone()));
    let mut handles = Vec::new();
    for t in 0..32usize {
        let w = Arc::clone(&writer);
        handles.push(tokio::spawn(async move {
            let mut i = t;
            while i < 10_000 {
                w.append(&event(format!("w-{i:05}"), "default", i as i64))
                    .await
                    .unwrap();
                i += 32;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(store.audit_count(None).await.unwrap(), 10_000);
}

#[tokio::test]
async fn a_duplicate_in_a_batch_fails_alone_and_its_neighbours_commit() {
    let (_dir, store) = fresh().await;
    store
        .append_audit(&event("taken".to_owned(), "default", 1))
        .await
        .unwrap();
    let writer = Arc::new(AuditWriter::spawn(store.clone()));
    let mut handles = Vec::new();
    for i in 0..64 {
        let w = Arc::clone(&writer);
        let id = if i == 31 {
            "taken".to_owned()
        } else {
            format!("n-{i}")
        };
        handles.push(tokio::spawn(async move {
            (i, w.append(&event(id, "default", 2)).await)
        }));
    }
    for h in handles {
        let (i, r) = h.await.unwrap();
        if i == 31 {
            let err = r.expect_err("the duplicate is refused");
            assert!(err.0.starts_with("store.query_failed"), "{}", err.0);
        } else {
            r.unwrap();
        }
    }
    assert_eq!(store.audit_count(None).await.unwrap(), 64);
}

#[tokio::test]
async fn a_batch_is_all_or_nothing() {
    let (_dir, store) = fresh().await;
    let batch = vec![
        event("a".to_owned(), "default", 1),
        event("b".to_owned(), "default", 1),
        event("a".to_owned(), "default", 1),
    ];
    assert!(store.append_audit_batch(&batch).await.is_err());
    assert_eq!(store.audit_count(None).await.unwrap(), 0);
    store.append_audit_batch(&batch[..2]).await.unwrap();
    assert_eq!(store.audit_count(None).await.unwrap(), 2);
}

#[tokio::test]
async fn a_writer_started_outside_any_runtime_still_answers_each_append_after_its_commit() {
    let (_dir, store) = fresh().await;
    let s = store.clone();
    let writer = std::thread::spawn(move || AuditWriter::spawn(s))
        .join()
        .unwrap();
    writer
        .append(&event("outside".to_owned(), "default", 1))
        .await
        .unwrap();
    assert_eq!(store.audit_count(None).await.unwrap(), 1);
}

#[test]
fn a_writer_whose_runtime_is_gone_still_answers_appends_from_another_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let url = Store::default_sqlite_url(dir.path());
    let first = tokio::runtime::Runtime::new().unwrap();
    let (store, writer) = first.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        let writer = AuditWriter::spawn(store.clone());
        writer
            .append(&event("first".to_owned(), "default", 1))
            .await
            .unwrap();
        (store, writer)
    });
    // The relay task dies with its runtime; the writer must not leave callers waiting.
    drop(first);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let count = second.block_on(async {
        let store = Store::connect(&url).await.unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            writer.append(&event("second".to_owned(), "default", 2)),
        )
        .await
        .expect("the append is answered")
        .unwrap();
        store.audit_count(None).await.unwrap()
    });
    assert_eq!(count, 2);
    drop(store);
}

#[tokio::test]
async fn events_through_the_writer_keep_every_field_and_their_purpose() {
    let (_dir, store) = fresh().await;
    let writer = AuditWriter::spawn(store.clone());
    let simulated = crate::common::full_event("sim", true);
    assert_eq!(
        simulated.purpose,
        corral_ports::runs::RunPurpose::Simulation
    );
    let live = event("live".to_owned(), "acme", simulated.ts_ms + 1);
    writer.append(&simulated).await.unwrap();
    writer.append(&live).await.unwrap();
    let stored = store.audit_recent(Some("acme"), 10).await.unwrap();
    assert_eq!(stored, [live, simulated]);
}
