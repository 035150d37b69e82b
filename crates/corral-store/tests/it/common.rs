//! Shared fixtures and the checks both backends must pass.

use std::collections::HashSet;
use std::sync::Arc;

use corral_ports::audit::{AttestationRecord, AuditEvent, AuditSink, Outcome};
use corral_ports::runs::RunPurpose;
use corral_store::{STORE_QUERY_FAILED, Store};

/// An event with every field set; `attestation` only when `attested`.
pub fn full_event(request_id: &str, attested: bool) -> AuditEvent {
    AuditEvent {
        request_id: request_id.to_owned(),
        tenant: "acme".to_owned(),
        ts_ms: 1_767_225_600_123,
        principal_id: "agent-7".to_owned(),
        principal_kind: "delegated".to_owned(),
        act_chain: vec!["svc:planner".to_owned(), "user:ada".to_owned()],
        op: "commands.run".to_owned(),
        outcome: Outcome::Denied,
        code: Some("policy.denied".to_owned()),
        rule: Some("rules[2] (deny rm)".to_owned()),
        args_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned(),
        args_shape: serde_json::json!({"argv": "array", "cwd": "string", "note": "null"}),
        status: 403,
        duration_us: 1_234,
        attestation: attested.then(|| AttestationRecord {
            backend: "process".to_owned(),
            isolated: false,
            destroyed: true,
            primitives: vec!["rlimit:as".to_owned(), "pgroup".to_owned()],
        }),
        action_id: attested.then(|| "6f1c0d2e-0000-4000-8000-000000000001".to_owned()),
        run_id: Some("run-7".to_owned()),
        detail: Some("approve".to_owned()),
        purpose: RunPurpose::Simulation,
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
    }
}

/// A small event for bulk tests.
pub fn event(request_id: String, tenant: &str, ts_ms: i64) -> AuditEvent {
    AuditEvent {
        request_id,
        tenant: tenant.to_owned(),
        ts_ms,
        principal_id: "anonymous".to_owned(),
        principal_kind: "service".to_owned(),
        act_chain: Vec::new(),
        op: "files.read".to_owned(),
        outcome: Outcome::Ok,
        code: None,
        rule: None,
        args_hash: "00".to_owned(),
        args_shape: serde_json::json!({"path": "string"}),
        status: 200,
        duration_us: 10,
        attestation: None,
        action_id: None,
        run_id: None,
        detail: None,
        purpose: RunPurpose::Live,
        trace_id: None,
    }
}

/// Every field survives a write and a read, with and without an attestation, and with every
/// `Outcome`.
pub async fn round_trip(store: &Store) {
    let with = full_event("req-with-attestation", true);
    let mut without = full_event("req-without-attestation", false);
    without.ts_ms += 1;
    without.code = None;
    without.rule = None;
    without.act_chain = Vec::new();
    without.outcome = Outcome::Ok;
    without.status = 200;

    // Through the port, as the guard chain calls it.
    let sink: &dyn AuditSink = store;
    sink.append(&with).await.unwrap();
    sink.append(&without).await.unwrap();

    assert_eq!(store.audit_count(None).await.unwrap(), 2);
    assert_eq!(store.audit_count(Some("acme")).await.unwrap(), 2);
    assert_eq!(store.audit_count(Some("other")).await.unwrap(), 0);

    let recent = store.audit_recent(Some("acme"), 10).await.unwrap();
    assert_eq!(recent, vec![without.clone(), with.clone()], "newest first");
    assert_eq!(recent[1].purpose, RunPurpose::Simulation);
    assert_eq!(store.audit_recent(None, 1).await.unwrap(), vec![without]);
    assert!(
        store
            .audit_recent(Some("other"), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let outcomes = [
        Outcome::Ok,
        Outcome::OpError,
        Outcome::Denied,
        Outcome::NotEnabled,
        Outcome::InvalidArgs,
        Outcome::Limited,
        Outcome::Unauthenticated,
        Outcome::AutonomyBlocked,
        Outcome::RbacDenied,
        Outcome::ConfirmationRaised,
        Outcome::ConfirmationDecided,
        Outcome::ConfirmationConsumed,
        Outcome::BudgetRefused,
        Outcome::DryRun,
        Outcome::Replayed,
    ];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let mut e = event(format!("outcome-{i}"), "outcomes", i as i64);
        e.outcome = outcome;
        e.status = u16::MAX - i as u16;
        e.duration_us = i64::MAX - i as i64;
        store.append_audit(&e).await.unwrap();
    }
    let stored = store.audit_recent(Some("outcomes"), 100).await.unwrap();
    let got: Vec<Outcome> = stored.iter().rev().map(|e| e.outcome).collect();
    assert_eq!(got, outcomes);
    assert_eq!(stored[stored.len() - 1].status, u16::MAX);
    assert_eq!(stored[stored.len() - 1].duration_us, i64::MAX);
}

/// `total` appends from `tasks` concurrent tasks: every one succeeds and lands exactly once.
pub async fn concurrent_appends(store: &Store, tasks: usize, total: usize) {
    let store = Arc::new(store.clone());
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let tenant = format!("tenant-{}", t % 4);
            let mut i = t;
            while i < total {
                let e = event(format!("bulk-{i:05}"), &tenant, i as i64);
                store.append(&e).await.unwrap();
                i += tasks;
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(store.audit_count(None).await.unwrap(), total as i64);
    let mut per_tenant = 0;
    for t in 0..4.min(tasks) {
        per_tenant += store
            .audit_count(Some(&format!("tenant-{t}")))
            .await
            .unwrap();
    }
    assert_eq!(per_tenant, total as i64);
    let all = store.audit_recent(None, u32::MAX).await.unwrap();
    let ids: HashSet<&str> = all.iter().map(|e| e.request_id.as_str()).collect();
    assert_eq!(ids.len(), total);
    assert_eq!(all[0].request_id, format!("bulk-{:05}", total - 1));
}

/// A second append with a stored `request_id` fails and does not change the stored event.
pub async fn duplicate_is_an_error(store: &Store) {
    let first = full_event("dup-1", true);
    store.append_audit(&first).await.unwrap();

    let mut second = full_event("dup-1", false);
    second.tenant = "other".to_owned();
    second.outcome = Outcome::Ok;
    let err = store.append_audit(&second).await.unwrap_err();
    assert_eq!(err.code(), STORE_QUERY_FAILED, "{err}");
    assert!(err.to_string().contains("duplicate"), "{err}");
    // Through the port too.
    let err = AuditSink::append(store, &second).await.unwrap_err();
    assert!(err.0.starts_with("store.query_failed"), "{err}");

    assert_eq!(store.audit_count(None).await.unwrap(), 1);
    assert_eq!(store.audit_recent(None, 10).await.unwrap(), vec![first]);
}

/// Events appended, the store dropped, the same URL opened again: the events are there.
pub async fn survives_reopen(url: &str) {
    let store = Store::connect(url).await.unwrap();
    for i in 0..50 {
        store
            .append_audit(&event(format!("keep-{i:02}"), "acme", i))
            .await
            .unwrap();
    }
    drop(store);

    let store = Store::connect(url).await.unwrap();
    assert_eq!(store.audit_count(Some("acme")).await.unwrap(), 50);
    let recent = store.audit_recent(Some("acme"), 3).await.unwrap();
    let ids: Vec<&str> = recent.iter().map(|e| e.request_id.as_str()).collect();
    assert_eq!(ids, ["keep-49", "keep-48", "keep-47"]);
    // Migrations ran again without harm, and the store still takes writes.
    store
        .append_audit(&event("keep-50".to_owned(), "acme", 50))
        .await
        .unwrap();
    assert_eq!(store.audit_count(None).await.unwrap(), 51);
    store.close().await;
}

/// `audit_matching`: each filter narrows the recent events to exact matches, within the tenant
/// asked for; no filter is `audit_recent`.
pub async fn filters_match_exactly(store: &Store) {
    use corral_store::AuditFilter;
    let mut events = Vec::new();
    for (i, (tenant, run, op, who)) in [
        ("t1", Some("r1"), "files.read", "ada"),
        ("t1", Some("r1"), "files.write", "ada"),
        ("t1", Some("r2"), "files.read", "bob"),
        ("t1", None, "files.read", "ada"),
        ("t2", Some("r1"), "files.read", "ada"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut e = event(format!("flt-{i}"), tenant, 1_000 + i as i64);
        e.run_id = run.map(str::to_owned);
        e.op = op.to_owned();
        e.principal_id = who.to_owned();
        // The lab's calls of run r2 are simulated.
        if run == Some("r2") {
            e.purpose = RunPurpose::Simulation;
        }
        events.push(e);
    }
    store.append_audit_batch(&events).await.unwrap();
    let ids = |v: Vec<AuditEvent>| v.into_iter().map(|e| e.request_id).collect::<Vec<_>>();
    let only = |run: Option<&str>, op: Option<&str>, who: Option<&str>| AuditFilter {
        run_id: run.map(str::to_owned),
        op: op.map(str::to_owned),
        principal_id: who.map(str::to_owned),
        purpose: None,
    };
    let t1 = Some("t1");
    let r1 = store
        .audit_matching(t1, &only(Some("r1"), None, None), 10)
        .await
        .unwrap();
    assert_eq!(ids(r1), ["flt-1", "flt-0"]);
    let read_r1 = only(Some("r1"), Some("files.read"), None);
    let r = store.audit_matching(t1, &read_r1, 10).await.unwrap();
    assert_eq!(ids(r), ["flt-0"]);
    let bob = store
        .audit_matching(t1, &only(None, None, Some("bob")), 10)
        .await
        .unwrap();
    assert_eq!(ids(bob), ["flt-2"]);
    let purpose = |p: RunPurpose| AuditFilter {
        purpose: Some(p),
        ..AuditFilter::default()
    };
    let simulated = store
        .audit_matching(t1, &purpose(RunPurpose::Simulation), 10)
        .await
        .unwrap();
    assert_eq!(ids(simulated), ["flt-2"]);
    let live = store
        .audit_matching(t1, &purpose(RunPurpose::Live), 10)
        .await
        .unwrap();
    assert_eq!(ids(live), ["flt-3", "flt-1", "flt-0"]);
    let live_read = AuditFilter {
        op: Some("files.read".to_owned()),
        ..purpose(RunPurpose::Live)
    };
    let r = store.audit_matching(t1, &live_read, 10).await.unwrap();
    assert_eq!(ids(r), ["flt-3", "flt-0"]);
    let all_tenants = store
        .audit_matching(None, &only(Some("r1"), None, None), 10)
        .await
        .unwrap();
    assert_eq!(ids(all_tenants), ["flt-4", "flt-1", "flt-0"]);
    let none = store
        .audit_matching(t1, &only(Some("r9"), None, None), 10)
        .await
        .unwrap();
    assert!(none.is_empty());
    let unfiltered = store
        .audit_matching(t1, &AuditFilter::default(), 2)
        .await
        .unwrap();
    assert_eq!(
        ids(unfiltered),
        ids(store.audit_recent(t1, 2).await.unwrap())
    );
}

/// The migrations before audit events carried a purpose (0001 to 0005), as a migrator of their
/// own: copied into `dir`, so a database can be made the way an older corral left it.
pub async fn migrator_before_purpose(dir: &std::path::Path) -> sqlx::migrate::Migrator {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut copied = 0;
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.as_str() < "0006" {
            std::fs::copy(&path, dir.join(&name)).unwrap();
            copied += 1;
        }
    }
    assert_eq!(copied, 5, "migrations 0001 to 0005");
    sqlx::migrate::Migrator::new(dir).await.unwrap()
}

/// Rows an older corral wrote: no `purpose` column yet.
pub const OLD_ROWS: &str = "INSERT INTO audit_events (request_id, tenant, ts_ms, principal_id, \
    principal_kind, act_chain, op, outcome, args_hash, args_shape, status, duration_us, run_id) \
    VALUES ('old-1', 'acme', 1000, 'agent', 'service', '[]', 'files.read', 'ok', '00', \
    '{\"path\":\"string\"}', 200, 7, 'r1'), \
    ('old-2', 'acme', 1001, 'agent', 'service', '[]', 'files.write', 'denied', '01', '{}', 403, \
    9, NULL)";

/// A store opened on a database an older corral left (`OLD_ROWS`): its rows read back as
/// `live`, the `live` filter finds them and the `simulation` one does not, and new events of
/// both purposes are stored beside them.
pub async fn old_rows_read_as_live(store: &Store) {
    use corral_store::AuditFilter;
    let old = store.audit_recent(Some("acme"), 10).await.unwrap();
    let seen: Vec<(&str, RunPurpose)> = old
        .iter()
        .map(|e| (e.request_id.as_str(), e.purpose))
        .collect();
    assert_eq!(
        seen,
        [("old-2", RunPurpose::Live), ("old-1", RunPurpose::Live)]
    );
    assert_eq!(old[1].run_id.as_deref(), Some("r1"));
    assert_eq!(old[1].args_shape, serde_json::json!({"path": "string"}));
    let json = serde_json::to_value(&old[0]).unwrap();
    assert_eq!(json["purpose"], "live", "{json}");

    let mut sim = event("new-sim".to_owned(), "acme", 2000);
    sim.purpose = RunPurpose::Simulation;
    store.append_audit(&sim).await.unwrap();
    store
        .append_audit(&event("new-live".to_owned(), "acme", 2001))
        .await
        .unwrap();
    let ids = |p: RunPurpose| async move {
        let f = AuditFilter {
            purpose: Some(p),
            ..AuditFilter::default()
        };
        let v = store.audit_matching(Some("acme"), &f, 10).await.unwrap();
        v.into_iter().map(|e| e.request_id).collect::<Vec<_>>()
    };
    assert_eq!(ids(RunPurpose::Live).await, ["new-live", "old-2", "old-1"]);
    assert_eq!(ids(RunPurpose::Simulation).await, ["new-sim"]);
}
