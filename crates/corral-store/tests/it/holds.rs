//! An agent session's held writes (migration 0023), each check run on SQLite and on
//! PostgreSQL: a hold stored whole or not at all, claimed once with a lease, claimed again when
//! its lease lapsed, deleted once applied, and every stored row checked again on its way out.

use std::collections::BTreeMap;

use corral_ports::holds::{HeldEntry, HeldKind, HeldPath, MAX_HOLD_BYTES};
use corral_store::Store;
use corral_store::agents::{AgentStoreError, NewSession, TurnEnd};
use serde_json::json;

use crate::postgres::Schema;

const HOLD: &str = "0123456789abcdef0123456789abcdef";

fn new_session() -> NewSession {
    NewSession {
        owner: "token:olga".to_owned(),
        adapter: "codex".to_owned(),
        model: "gpt-5-codex".to_owned(),
        agent_id: None,
        workdir: "/workspace".to_owned(),
        metadata: BTreeMap::new(),
    }
}

fn entry(kind: HeldKind, path: &str, mode: u32, content: &[u8]) -> HeldEntry {
    HeldEntry::new(kind, HeldPath::new(path).unwrap(), mode, content.to_vec()).unwrap()
}

fn entries() -> Vec<HeldEntry> {
    vec![
        entry(HeldKind::Dir, "docs", 0o755, b""),
        entry(
            HeldKind::File,
            "docs/README.md",
            0o644,
            b"SECRET-CONTENT\0\xff",
        ),
        entry(HeldKind::Symlink, "docs/latest", 0o777, b"README.md"),
        entry(HeldKind::Delete, "old.txt", 0, b""),
    ]
}

/// A store with session `sess-h` of tenant `acme`, holding [`entries`] as [`HOLD`].
async fn store_with_hold(url: &str) -> Store {
    let store = Store::connect(url).await.unwrap();
    hold_in(&store, "sess-h").await;
    store
}

/// Session `session` of tenant `acme`, made, holding [`entries`] as [`HOLD`].
async fn hold_in(store: &Store, session: &str) {
    store
        .create_session("acme", session, &new_session(), 100, 10)
        .await
        .unwrap();
    let mut w = store.begin_hold("acme", session, HOLD).await.unwrap();
    for e in entries() {
        w.push(&e).await.unwrap();
    }
    let kept = w.commit(11).await.unwrap();
    assert_eq!(
        (kept.status.as_str(), kept.entries, kept.bytes),
        ("pending", 4, 25)
    );
}

fn idle() -> TurnEnd {
    TurnEnd {
        status: "idle".to_owned(),
        error: None,
        usage: json!({}),
        attestation: json!({}),
        cli_thread: None,
    }
}

on_both!(a_hold_is_claimed_once_read_under_its_claim_and_gone_once_applied);
async fn a_hold_is_claimed_once_read_under_its_claim_and_gone_once_applied(url: &str) {
    let store = store_with_hold(url).await;
    // Nothing is read without the claim, and another tenant sees nothing.
    let none = store.hold_entries("acme", "sess-h", HOLD, "c1", 0, 100);
    assert_eq!(none.await.unwrap(), vec![]);
    assert_eq!(
        store.get_hold("globex", "sess-h", HOLD).await.unwrap(),
        None
    );

    let claimed = store
        .claim_hold("acme", "sess-h", HOLD, "c1", 20, 1_000)
        .await
        .unwrap();
    assert_eq!(
        (claimed.status.as_str(), claimed.lease_until_ms),
        ("applying", Some(1_000))
    );
    // A second apply (another replica) is refused while the lease runs; so is a turn.
    let again = store.claim_hold("acme", "sess-h", HOLD, "c2", 30, 2_000);
    let again = again.await.unwrap_err();
    assert_eq!(again.code(), "agents.hold_applying", "{again}");
    let turn = store.claim_turn("acme", "sess-h", 40).await.unwrap_err();
    assert_eq!(turn.code(), "agents.session_busy");
    assert!(turn.to_string().contains("applying held changes"), "{turn}");

    // Read back whole, in order, in pages, as stored.
    let first = store.hold_entries("acme", "sess-h", HOLD, "c1", 0, 3);
    let first = first.await.unwrap();
    let rest = store.hold_entries("acme", "sess-h", HOLD, "c1", 3, 3);
    let rest = rest.await.unwrap();
    assert_eq!(
        first.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let read: Vec<HeldEntry> = first.into_iter().chain(rest).map(|(_, e)| e).collect();
    assert_eq!(read, entries());

    // Only the claim ends it: the other claim's finish changes nothing.
    assert!(
        !store
            .finish_hold("acme", "sess-h", HOLD, "c2")
            .await
            .unwrap()
    );
    assert!(
        store
            .finish_hold("acme", "sess-h", HOLD, "c1")
            .await
            .unwrap()
    );
    assert_eq!(store.get_hold("acme", "sess-h", HOLD).await.unwrap(), None);
    let gone = store.claim_hold("acme", "sess-h", HOLD, "c3", 50, 3_000);
    let gone = gone.await.unwrap_err();
    assert_eq!(gone.code(), "agents.hold_not_found", "{gone}");
    assert!(
        !store
            .finish_hold("acme", "sess-h", HOLD, "c1")
            .await
            .unwrap()
    );
    // The session is free again: its next turn starts.
    store.claim_turn("acme", "sess-h", 60).await.unwrap();
    store.close().await;
}

on_both!(a_lapsed_claim_is_claimed_again_and_the_late_apply_changes_nothing);
async fn a_lapsed_claim_is_claimed_again_and_the_late_apply_changes_nothing(url: &str) {
    let store = store_with_hold(url).await;
    store
        .claim_hold("acme", "sess-h", HOLD, "dead", 20, 100)
        .await
        .unwrap();
    // The replica that claimed it died: past its lease, another claims it.
    let second = store.claim_hold("acme", "sess-h", HOLD, "c2", 101, 1_000);
    assert_eq!(second.await.unwrap().lease_until_ms, Some(1_000));
    // The late one, back, can neither renew, read, finish nor release it.
    assert!(
        !store
            .renew_hold("acme", "sess-h", HOLD, "dead", 5_000)
            .await
            .unwrap()
    );
    let read = store.hold_entries("acme", "sess-h", HOLD, "dead", 0, 100);
    assert_eq!(read.await.unwrap(), vec![]);
    assert!(
        !store
            .finish_hold("acme", "sess-h", HOLD, "dead")
            .await
            .unwrap()
    );
    assert!(
        !store
            .release_hold("acme", "sess-h", HOLD, "dead")
            .await
            .unwrap()
    );
    assert!(
        store
            .get_hold("acme", "sess-h", HOLD)
            .await
            .unwrap()
            .is_some()
    );

    // The live claim renews, then a failed apply releases it: pending again, kept.
    assert!(
        store
            .renew_hold("acme", "sess-h", HOLD, "c2", 2_000)
            .await
            .unwrap()
    );
    let renewed = store
        .get_hold("acme", "sess-h", HOLD)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(renewed.lease_until_ms, Some(2_000));
    assert!(
        store
            .release_hold("acme", "sess-h", HOLD, "c2")
            .await
            .unwrap()
    );
    let kept = store
        .get_hold("acme", "sess-h", HOLD)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (kept.status.as_str(), kept.lease_until_ms),
        ("pending", None)
    );
    store
        .claim_hold("acme", "sess-h", HOLD, "c3", 300, 1_000)
        .await
        .unwrap();
    store.close().await;
}

on_both!(an_apply_waits_for_a_running_turn_and_a_lapsed_one_cannot_renew_over_a_turn);
async fn an_apply_waits_for_a_running_turn_and_a_lapsed_one_cannot_renew_over_a_turn(url: &str) {
    let store = store_with_hold(url).await;
    store.claim_turn("acme", "sess-h", 20).await.unwrap();
    let busy = store.claim_hold("acme", "sess-h", HOLD, "c1", 21, 1_000);
    assert_eq!(busy.await.unwrap_err().code(), "agents.session_busy");
    store
        .end_turn("acme", "sess-h", 1, &idle(), 22)
        .await
        .unwrap();
    store
        .claim_hold("acme", "sess-h", HOLD, "c1", 23, 100)
        .await
        .unwrap();
    // Its lease lapsed and a turn started: the apply may not go on over it.
    store.claim_turn("acme", "sess-h", 101).await.unwrap();
    assert!(
        !store
            .renew_hold("acme", "sess-h", HOLD, "c1", 5_000)
            .await
            .unwrap()
    );
    store.close().await;
}

on_both!(concurrent_claims_of_one_hold_leave_exactly_one_apply);
async fn concurrent_claims_of_one_hold_leave_exactly_one_apply(url: &str) {
    let store = store_with_hold(url).await;
    let claims = (0..8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .claim_hold("acme", "sess-h", HOLD, &format!("c{i}"), 20, 1_000)
                .await
        })
    });
    let mut won = 0;
    for c in claims {
        match c.await.unwrap() {
            Ok(_) => won += 1,
            Err(e) => assert_eq!(e.code(), "agents.hold_applying", "{e}"),
        }
    }
    assert_eq!(won, 1);
    store.close().await;
}

on_both!(an_oversized_hold_keeps_nothing_and_a_deleted_session_takes_its_holds);
async fn an_oversized_hold_keeps_nothing_and_a_deleted_session_takes_its_holds(url: &str) {
    let store = store_with_hold(url).await;
    let other = "fedcba9876543210fedcba9876543210";
    let mut w = store.begin_hold("acme", "sess-h", other).await.unwrap();
    w.push(&entry(HeldKind::File, "a", 0o644, b"a"))
        .await
        .unwrap();
    let big = vec![0u8; usize::try_from(MAX_HOLD_BYTES).unwrap()];
    let refused = w.push(&entry(HeldKind::File, "big", 0o644, &big)).await;
    assert!(
        matches!(refused, Err(AgentStoreError::HoldTooLarge)),
        "{refused:?}"
    );
    assert_eq!(refused.unwrap_err().code(), "agents.hold_too_large");
    drop(w);
    assert_eq!(store.get_hold("acme", "sess-h", other).await.unwrap(), None);
    // A hold of a session that is gone is not kept.
    let mut w = store.begin_hold("acme", "no-such", other).await.unwrap();
    w.push(&entry(HeldKind::Dir, "d", 0o755, b""))
        .await
        .unwrap();
    assert_eq!(w.commit(12).await.unwrap_err().code(), "agents.not_found");
    // Only corral's ids name a hold.
    for bad in ["../../etc", "0123456789ABCDEF0123456789ABCDEF", ""] {
        let refused = store.begin_hold("acme", "sess-h", bad).await.unwrap_err();
        assert_eq!(refused.code(), "agents.hold_invalid");
    }
    store.delete_session("acme", "sess-h").await.unwrap();
    assert_eq!(store.get_hold("acme", "sess-h", HOLD).await.unwrap(), None);
    store
        .create_session("acme", "sess-h", &new_session(), 100, 13)
        .await
        .unwrap();
    let gone = store.claim_hold("acme", "sess-h", HOLD, "c1", 20, 1_000);
    assert_eq!(gone.await.unwrap_err().code(), "agents.hold_not_found");
    store.close().await;
}

on_both!(a_stored_row_is_checked_again_on_its_way_out);
/// A row changed behind corral's back (or by a bug) is as hostile as the agent: a path out of
/// the workdir, an unknown kind, a set-id mode; reading it refuses the hold (or cuts the mode).
async fn a_stored_row_is_checked_again_on_its_way_out(url: &str) {
    let store = Store::connect(url).await.unwrap();
    for (i, (kind, path, mode, refused)) in [
        ("file", "../../etc/cron.d/x", 0o644, true),
        ("file", "/etc/passwd", 0o644, true),
        ("file", "a/./b", 0o644, true),
        ("fifo", "a", 0o644, true),
        ("dir", "a", -1, true),
        ("file", "setuid", 0o4755, false),
    ]
    .into_iter()
    .enumerate()
    {
        let session = format!("sess-{i}");
        hold_in(&store, &session).await;
        raw_sql(
            url,
            &format!(
                "UPDATE agent_hold_entries SET kind = '{kind}', path = '{path}', mode = {mode} \
                 WHERE session_id = '{session}' AND seq = 2"
            ),
        )
        .await;
        store
            .claim_hold("acme", &session, HOLD, "c1", 20, 1_000)
            .await
            .unwrap();
        let read = store
            .hold_entries("acme", &session, HOLD, "c1", 0, 100)
            .await;
        if refused {
            let e = read.unwrap_err();
            assert_eq!(e.code(), "agents.hold_invalid", "{kind} {path}: {e}");
            assert!(
                !e.to_string().contains("SECRET"),
                "no content in the message: {e}"
            );
        } else {
            assert_eq!(read.unwrap()[1].1.mode(), 0o755);
        }
    }
    store.close().await;
}

/// Runs `sql` on the store at `url`, behind corral's back.
async fn raw_sql(url: &str, sql: &str) {
    use sqlx::Connection;
    if let Some(path) = url.strip_prefix("sqlite://") {
        let mut c = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(path),
        )
        .await
        .unwrap();
        sqlx::query(sql).execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(sql).execute(&mut c).await.unwrap();
    }
}

on_both!(a_session_is_not_deleted_while_a_hold_of_it_is_being_applied);
/// A live apply's lease keeps its session (and the hold it reads) until the apply ends: a
/// delete meanwhile is `agents.session_busy`, naming the apply; once it ended, the delete goes.
async fn a_session_is_not_deleted_while_a_hold_of_it_is_being_applied(url: &str) {
    let store = store_with_hold(url).await;
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    store
        .claim_hold("acme", "sess-h", HOLD, "c1", now, now + 600_000)
        .await
        .unwrap();
    let refused = store.delete_session("acme", "sess-h").await.unwrap_err();
    assert_eq!(refused.code(), "agents.session_busy");
    assert!(
        refused.to_string().contains("applying held changes"),
        "{refused}"
    );
    assert!(
        store
            .get_hold("acme", "sess-h", HOLD)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .release_hold("acme", "sess-h", HOLD, "c1")
            .await
            .unwrap()
    );
    store.delete_session("acme", "sess-h").await.unwrap();
    assert_eq!(store.get_hold("acme", "sess-h", HOLD).await.unwrap(), None);
    store.close().await;
}
