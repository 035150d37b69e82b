//! Recordings in the store (migration 0009), each check run on SQLite and on PostgreSQL:
//! `recordings::<check>::on_sqlite` and `recordings::<check>::on_postgres`.

use std::sync::Arc;
use std::time::Duration;

use corral_ports::audit::AttestationRecord;
use corral_ports::recording::{Recorded, RecordedCall, Recorder, RecordingKey};
use corral_ports::runs::RunPurpose;
use corral_store::lab::Page;
use corral_store::recording::{MAX_RECORDING_BYTES, RecordingLimits};
use corral_store::{RecordingWriter, Store};
use serde_json::json;

use crate::postgres::Schema;

/// Runs `$check(&Store)` on a fresh SQLite file and on a fresh PostgreSQL schema.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::connect(&Store::default_sqlite_url(dir.path()))
                    .await
                    .unwrap();
                super::$name(&store).await;
                store.close().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn on_postgres() {
                let Some(schema) = Schema::create("rec").await else {
                    return;
                };
                let store = Store::connect(&schema.url).await.unwrap();
                super::$name(&store).await;
                store.close().await;
                schema.drop().await;
            }
        }
    };
}

const T0: i64 = 1_767_225_600_000;

fn key(tenant: &str, run: &str, principal: &str) -> RecordingKey {
    RecordingKey {
        tenant: tenant.to_owned(),
        run_id: run.to_owned(),
        identity: principal.to_owned(),
        principal: principal.to_owned(),
        purpose: RunPurpose::Live,
    }
}

fn call(op: &str, args: &str, response: Option<serde_json::Value>) -> RecordedCall {
    RecordedCall {
        op: op.to_owned(),
        args: args.to_owned(),
        response,
        error_code: None,
        attestation: None,
        started_ms: T0,
        duration_us: 42,
    }
}

on_both!(a_recording_keeps_every_call_in_order_with_its_values);
async fn a_recording_keeps_every_call_in_order_with_its_values(store: &Store) {
    let k = key("acme", "run-1", "ada");
    let read = call(
        "files.read",
        r#"{"path":"/w/a.txt"}"#,
        Some(json!({"content": "hello\u{0}world", "bytes": 11})),
    );
    let mut denied = call("files.delete", r#"{"path":"/etc/passwd"}"#, None);
    denied.error_code = Some("policy.path_denied".to_owned());
    let mut ran = call(
        "commands.run",
        r#"{"argv":["ls"]}"#,
        Some(json!({"exit": 0})),
    );
    ran.attestation = Some(AttestationRecord {
        backend: "linux".to_owned(),
        isolated: true,
        destroyed: true,
        primitives: vec!["landlock".to_owned(), "seccomp".to_owned()],
    });
    ran.started_ms = T0 + 5;
    // Through the port, as the gateway writes: queued, numbered by the writer in order, and
    // seen by the next read.
    let writer = RecordingWriter::spawn(store);
    let port: &dyn Recorder = &writer;
    port.admit(&k, T0).await.unwrap();
    for (i, c) in [&read, &denied, &ran].into_iter().enumerate() {
        let got = port.record(&k, c, T0 + i as i64).await.unwrap();
        assert_eq!(got, Recorded::Queued);
    }

    let r = store
        .get_recording("acme", "run-1", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            r.principal.as_str(),
            r.purpose,
            r.events,
            r.capped,
            r.gapped
        ),
        ("ada", RunPurpose::Live, 3, false, false)
    );
    assert_eq!((r.created_ms, r.updated_ms), (T0, T0 + 2));
    let bytes: u64 = [&read, &denied, &ran]
        .iter()
        .map(|c| c.stored_bytes())
        .sum();
    assert_eq!(r.bytes, bytes);
    assert_eq!(
        r.expires_ms,
        T0 + RecordingLimits::default().retention.as_millis() as i64
    );

    let events = store
        .recording_events("acme", "run-1", "ada")
        .await
        .unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(events[0].op, "files.read");
    assert_eq!(events[0].args, json!({"path": "/w/a.txt"}));
    assert_eq!(events[0].response, read.response, "a NUL survives");
    assert_eq!(events[0].error_code, None);
    assert_eq!(events[1].response, None);
    assert_eq!(events[1].error_code.as_deref(), Some("policy.path_denied"));
    assert_eq!(events[2].attestation, ran.attestation);
    assert_eq!((events[2].started_ms, events[2].duration_us), (T0 + 5, 42));
}

on_both!(another_tenant_sees_no_recording_and_cannot_add_to_it);
async fn another_tenant_sees_no_recording_and_cannot_add_to_it(store: &Store) {
    let k = key("acme", "shared-id", "ada");
    store
        .record_call(&k, &call("files.read", "{}", Some(json!("secret"))), T0)
        .await
        .unwrap();
    assert_eq!(
        store
            .get_recording("globex", "shared-id", "ada")
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .recording_events("globex", "shared-id", "ada")
            .await
            .unwrap()
            .is_empty()
    );
    let listed = store
        .list_recordings("globex", None, &Page::first(10))
        .await
        .unwrap();
    assert!(listed.items.is_empty());

    // The same run id in another tenant is another recording.
    let other = key("globex", "shared-id", "ada");
    let got = store
        .record_call(&other, &call("files.list", "{}", None), T0 + 1)
        .await
        .unwrap();
    assert_eq!(got, Recorded::Stored { seq: 1 });
    let acme = store
        .recording_events("acme", "shared-id", "ada")
        .await
        .unwrap();
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0].op, "files.read");
}

on_both!(two_principals_recording_under_one_run_id_get_a_recording_each);
async fn two_principals_recording_under_one_run_id_get_a_recording_each(store: &Store) {
    let ada = key("acme", "r", "token:service:ada");
    let eve = key("acme", "r", "jwt:idp:person:ada");
    store
        .record_call(&ada, &call("files.read", "{}", None), T0)
        .await
        .unwrap();
    // Another identity (even with the same id) writes its own recording, from seq 1.
    let got = store
        .record_call(&eve, &call("files.write", "{}", None), T0 + 1)
        .await
        .unwrap();
    assert_eq!(got, Recorded::Stored { seq: 1 });
    store.mark_recording_gapped(&eve, T0 + 2).await.unwrap();
    let mine = store
        .get_recording("acme", "r", "token:service:ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((mine.events, mine.gapped), (1, false));
    let theirs = store
        .recording_events("acme", "r", "jwt:idp:person:ada")
        .await
        .unwrap();
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].op, "files.write");
    let both = store.recordings_of_run("acme", "r", 10).await.unwrap();
    let ids: Vec<&str> = both.iter().map(|r| r.identity.as_str()).collect();
    assert_eq!(ids, ["jwt:idp:person:ada", "token:service:ada"]);
}

on_both!(the_event_that_would_pass_the_event_cap_is_not_stored_and_the_recording_says_capped);
async fn the_event_that_would_pass_the_event_cap_is_not_stored_and_the_recording_says_capped(
    store: &Store,
) {
    let store = store.clone().with_recording_limits(RecordingLimits {
        max_events: 3,
        ..RecordingLimits::default()
    });
    let k = key("acme", "long", "ada");
    for i in 0..3 {
        let got = store
            .record_call(&k, &call("files.read", "{}", None), T0 + i)
            .await
            .unwrap();
        assert_eq!(got, Recorded::Stored { seq: i as u64 + 1 });
    }
    let fourth = store
        .record_call(&k, &call("files.read", "{}", None), T0 + 3)
        .await
        .unwrap();
    assert_eq!(fourth, Recorded::Capped);
    let r = store
        .get_recording("acme", "long", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.events, r.capped), (3, true));
    assert_eq!(
        store
            .recording_events("acme", "long", "ada")
            .await
            .unwrap()
            .len(),
        3
    );
}

on_both!(the_event_that_would_pass_the_byte_cap_is_not_stored_nor_any_after_it);
async fn the_event_that_would_pass_the_byte_cap_is_not_stored_nor_any_after_it(store: &Store) {
    let store = store.clone().with_recording_limits(RecordingLimits {
        max_bytes: 100,
        ..RecordingLimits::default()
    });
    let k = key("acme", "big", "ada");
    let small = call("files.read", "{}", Some(json!("x".repeat(40))));
    assert_eq!(
        store.record_call(&k, &small, T0).await.unwrap(),
        Recorded::Stored { seq: 1 }
    );
    let large = call("files.read", "{}", Some(json!("y".repeat(80))));
    assert_eq!(
        store.record_call(&k, &large, T0).await.unwrap(),
        Recorded::Capped
    );
    // Once capped, even an event that would fit is not stored: the timeline is never holed.
    let tiny = call("files.list", "{}", None);
    assert_eq!(
        store.record_call(&k, &tiny, T0).await.unwrap(),
        Recorded::Capped
    );
    let r = store
        .get_recording("acme", "big", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.events, r.bytes, r.capped),
        (1, small.stored_bytes(), true)
    );
}

on_both!(an_event_over_16_mib_caps_a_recording_with_the_default_limits);
async fn an_event_over_16_mib_caps_a_recording_with_the_default_limits(store: &Store) {
    let k = key("acme", "huge", "ada");
    let huge = call(
        "files.read",
        "{}",
        Some(json!("z".repeat(MAX_RECORDING_BYTES as usize))),
    );
    assert_eq!(
        store.record_call(&k, &huge, T0).await.unwrap(),
        Recorded::Capped
    );
    let r = store
        .get_recording("acme", "huge", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.events, r.bytes, r.capped), (0, 0, true));
    assert!(
        store
            .recording_events("acme", "huge", "ada")
            .await
            .unwrap()
            .is_empty()
    );
}

on_both!(a_gap_is_marked_on_the_recording);
async fn a_gap_is_marked_on_the_recording(store: &Store) {
    let k = key("acme", "holed", "ada");
    store
        .record_call(&k, &call("files.read", "{}", None), T0)
        .await
        .unwrap();
    let writer = RecordingWriter::spawn(store);
    let port: &dyn Recorder = &writer;
    port.mark_gapped(&k, T0 + 9).await.unwrap();
    let r = store
        .get_recording("acme", "holed", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.events, r.gapped, r.capped, r.updated_ms),
        (1, true, false, T0 + 9)
    );
    // A gap before any event creates the recording, so the hole is never lost.
    let fresh = key("acme", "holed-first", "ada");
    store.mark_recording_gapped(&fresh, T0).await.unwrap();
    let r = store
        .get_recording("acme", "holed-first", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.events, r.gapped), (0, true));
}

on_both!(purge_deletes_only_expired_recordings_with_their_events);
async fn purge_deletes_only_expired_recordings_with_their_events(store: &Store) {
    let store = store.clone().with_recording_limits(RecordingLimits {
        retention: Duration::from_secs(60),
        ..RecordingLimits::default()
    });
    store
        .record_call(
            &key("acme", "old", "ada"),
            &call("files.read", "{}", None),
            T0,
        )
        .await
        .unwrap();
    store
        .record_call(
            &key("globex", "new", "bob"),
            &call("files.read", "{}", None),
            T0 + 30_000,
        )
        .await
        .unwrap();
    assert_eq!(store.purge_recordings(T0 + 59_999).await.unwrap(), 0);
    assert_eq!(store.purge_recordings(T0 + 60_000).await.unwrap(), 1);
    assert_eq!(
        store.get_recording("acme", "old", "ada").await.unwrap(),
        None
    );
    assert!(
        store
            .recording_events("acme", "old", "ada")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .get_recording("globex", "new", "bob")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store
            .recording_events("globex", "new", "bob")
            .await
            .unwrap()
            .len(),
        1
    );
    // A run id purged is free again: a new recording starts at seq 1.
    let again = store
        .record_call(
            &key("acme", "old", "ada"),
            &call("files.read", "{}", None),
            T0 + 60_001,
        )
        .await
        .unwrap();
    assert_eq!(again, Recorded::Stored { seq: 1 });
}

on_both!(recordings_are_listed_newest_first_a_page_at_a_time_for_the_tenant_or_one_principal);
async fn recordings_are_listed_newest_first_a_page_at_a_time_for_the_tenant_or_one_principal(
    store: &Store,
) {
    for i in 0..5 {
        store
            .record_call(
                &key(
                    "acme",
                    &format!("run-{i}"),
                    if i == 2 { "bob" } else { "ada" },
                ),
                &call("files.read", "{}", None),
                T0 + i,
            )
            .await
            .unwrap();
    }
    let first = store
        .list_recordings("acme", None, &Page::first(2))
        .await
        .unwrap();
    let ids = |p: &corral_store::lab::Paged<corral_store::recording::Recording>| {
        p.items.iter().map(|r| r.run_id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&first), ["run-4", "run-3"]);
    let second = store
        .list_recordings(
            "acme",
            None,
            &Page {
                limit: 2,
                after: first.next.clone(),
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&second), ["run-2", "run-1"]);
    let last = store
        .list_recordings(
            "acme",
            None,
            &Page {
                limit: 2,
                after: second.next.clone(),
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(&last), ["run-0"]);
    assert_eq!(last.next, None);
    // One principal's only.
    let bob = store
        .list_recordings("acme", Some("bob"), &Page::first(10))
        .await
        .unwrap();
    assert_eq!(ids(&bob), ["run-2"]);
    let ada = store
        .list_recordings("acme", Some("ada"), &Page::first(10))
        .await
        .unwrap();
    assert_eq!(ids(&ada), ["run-4", "run-3", "run-1", "run-0"]);
}

on_both!(concurrent_calls_of_one_run_get_every_seq_once_without_gaps);
async fn concurrent_calls_of_one_run_get_every_seq_once_without_gaps(store: &Store) {
    let store = Arc::new(store.clone());
    let mut handles = Vec::new();
    for t in 0..8 {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..5 {
                let c = call("files.read", &format!("{{\"t\":{t},\"i\":{i}}}"), None);
                match store
                    .record_call(&key("acme", "busy", "ada"), &c, T0)
                    .await
                    .unwrap()
                {
                    Recorded::Stored { seq } => seqs.push(seq),
                    other => panic!("stored at once, not {other:?}"),
                }
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(all, (1..=40).collect::<Vec<u64>>());
    let events = store.recording_events("acme", "busy", "ada").await.unwrap();
    assert_eq!(events.len(), 40);
    let r = store
        .get_recording("acme", "busy", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.events, 40);
}

on_both!(a_task_input_is_kept_once_for_the_recordings_principal_and_counts_in_its_bytes);
async fn a_task_input_is_kept_once_for_the_recordings_principal_and_counts_in_its_bytes(
    store: &Store,
) {
    let input = json!({"steps": [{"input": "summarise notes.txt"}]});
    store
        .set_recording_input(&key("acme", "r", "ada"), &input, T0)
        .await
        .unwrap();
    let r = store
        .get_recording("acme", "r", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.input, Some(input.clone()));
    assert_eq!(r.bytes, input.to_string().len() as u64);
    // Calls after it join the same recording.
    store
        .record_call(
            &key("acme", "r", "ada"),
            &call("files.read", "{}", None),
            T0,
        )
        .await
        .unwrap();
    let again = store
        .set_recording_input(&key("acme", "r", "ada"), &json!("other"), T0)
        .await
        .unwrap_err();
    assert_eq!(again.code(), "recording.input_set", "{again}");
    // Another principal's input of the same run id is its own recording's.
    store
        .set_recording_input(&key("acme", "r", "eve"), &json!("other"), T0)
        .await
        .unwrap();
    let r = store
        .get_recording("acme", "r", "ada")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.input, r.events), (Some(input), 1));
    // Another tenant's run of the same id is its own.
    assert!(
        store
            .get_recording("other", "r", "ada")
            .await
            .unwrap()
            .is_none()
    );
}

on_both!(calls_of_many_runs_queued_together_keep_each_runs_order_without_gaps);
async fn calls_of_many_runs_queued_together_keep_each_runs_order_without_gaps(store: &Store) {
    let writer = Arc::new(RecordingWriter::spawn(store));
    let mut handles = Vec::new();
    for t in 0..4 {
        let writer = Arc::clone(&writer);
        handles.push(tokio::spawn(async move {
            let k = key("acme", &format!("run-{t}"), "ada");
            for i in 0..50 {
                let c = call("files.read", &format!("{{\"i\":{i}}}"), None);
                writer.record(&k, &c, T0).await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    for t in 0..4 {
        let events = store
            .recording_events("acme", &format!("run-{t}"), "ada")
            .await
            .unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=50).collect::<Vec<u64>>());
        let args: Vec<String> = events.iter().map(|e| e.args["i"].to_string()).collect();
        let want: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        assert_eq!(args, want, "in the order each run called");
    }
}

on_both!(a_call_that_would_start_a_recording_past_the_tenants_limit_is_refused_before_it_runs);
async fn a_call_that_would_start_a_recording_past_the_tenants_limit_is_refused_before_it_runs(
    store: &Store,
) {
    let store = store.clone().with_recording_limits(RecordingLimits {
        max_per_tenant: 2,
        ..RecordingLimits::default()
    });
    let writer = RecordingWriter::spawn(&store);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for run in ["a", "b"] {
        let k = key("acme", run, "ada");
        writer.admit(&k, now).await.unwrap();
        writer
            .record(&k, &call("files.read", "{}", None), now)
            .await
            .unwrap();
    }
    let refused = writer
        .admit(&key("acme", "c", "ada"), now)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "recording.limit");
    assert!(
        refused.message.contains("recordings.max_per_tenant"),
        "{}",
        refused.message
    );
    // A recording that exists takes more calls; another tenant has its own count.
    writer.admit(&key("acme", "a", "ada"), now).await.unwrap();
    writer.admit(&key("globex", "c", "ada"), now).await.unwrap();
    // A fresh writer (another process) counts from the store.
    let other = RecordingWriter::spawn(&store);
    let refused = other
        .admit(&key("acme", "d", "bob"), now)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "recording.limit");
    other.admit(&key("acme", "b", "ada"), now).await.unwrap();
}

on_both!(one_principal_cannot_fill_the_tenants_recordings_past_its_share);
/// Regression (attack finding Y-3): one operator could start recordings until the tenant's
/// `max_per_tenant` was reached, and then no one else in the tenant could record.
async fn one_principal_cannot_fill_the_tenants_recordings_past_its_share(store: &Store) {
    let store = store.clone().with_recording_limits(RecordingLimits {
        max_per_tenant: 4,
        max_per_principal: 2,
        ..RecordingLimits::default()
    });
    let writer = RecordingWriter::spawn(&store);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for run in ["a", "b"] {
        let k = key("acme", run, "mallory");
        writer.admit(&k, now).await.unwrap();
        writer
            .record(&k, &call("files.read", "{}", None), now)
            .await
            .unwrap();
    }
    let refused = writer
        .admit(&key("acme", "c", "mallory"), now)
        .await
        .unwrap_err();
    assert_eq!(refused.code, "recording.limit");
    assert!(
        refused.message.contains("recordings.max_per_principal"),
        "{}",
        refused.message
    );
    // Her own recordings take more calls; another principal still records.
    writer
        .admit(&key("acme", "a", "mallory"), now)
        .await
        .unwrap();
    writer.admit(&key("acme", "c", "ada"), now).await.unwrap();
    // An admin's delete frees her share, counted again by a fresh writer.
    assert!(
        store
            .delete_recording("acme", "a", "mallory")
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_recording("acme", "a", "mallory")
            .await
            .unwrap()
    );
    assert!(
        store
            .get_recording("acme", "a", "mallory")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .recording_events("acme", "a", "mallory")
            .await
            .unwrap()
            .is_empty()
    );
    let other = RecordingWriter::spawn(&store);
    other
        .admit(&key("acme", "d", "mallory"), now)
        .await
        .unwrap();
}
