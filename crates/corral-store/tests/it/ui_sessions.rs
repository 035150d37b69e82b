//! The web console's sessions (migration 0019), each check run on SQLite and on PostgreSQL:
//! absolute and idle expiry, sign-out on one store seen by another (replicas), the per-identity
//! cap, and the purge.

use corral_store::Store;
use corral_store::ui_sessions::{MAX_SESSIONS_PER_IDENTITY, UiSession};

use crate::postgres::Schema;

macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_sqlite() {
                let dir = tempfile::tempdir().unwrap();
                let url = Store::default_sqlite_url(dir.path());
                super::$name(&url).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_postgres() {
                let Some(schema) = Schema::create("ui").await else {
                    return;
                };
                super::$name(&schema.url).await;
                schema.drop().await;
            }
        }
    };
}

const IDLE: i64 = 30 * 60 * 1000;

fn session(id: &str, identity: &str, created: i64) -> UiSession {
    UiSession {
        id_hash: id.to_owned(),
        identity: identity.to_owned(),
        proof: format!("{{\"kind\":\"token\",\"of\":\"{id}\"}}"),
        created_ms: created,
        seen_ms: created,
        expires_ms: created + 8 * 3600 * 1000,
    }
}

on_both!(a_session_lives_until_its_idle_or_absolute_expiry_and_sign_out_ends_it_everywhere);

async fn a_session_lives_until_its_idle_or_absolute_expiry_and_sign_out_ends_it_everywhere(
    url: &str,
) {
    let a = Store::connect(url).await.unwrap();
    // A second store on the same database: another replica.
    let b = Store::connect(url).await.unwrap();
    let t0 = 1_000_000;
    let s = session("h1", "token:person:ada", t0);
    a.create_ui_session(&s).await.unwrap();
    assert_eq!(
        b.ui_session("h1", t0 + 1, IDLE).await.unwrap(),
        Some(s.clone())
    );
    assert_eq!(b.ui_session("nope", t0 + 1, IDLE).await.unwrap(), None);
    // Idle: unseen for the idle timeout, it is gone; touched, it lives on.
    assert_eq!(a.ui_session("h1", t0 + IDLE, IDLE).await.unwrap(), None);
    b.touch_ui_session("h1", t0 + IDLE - 1).await.unwrap();
    // A touch never goes back in time.
    a.touch_ui_session("h1", t0).await.unwrap();
    let seen = a.ui_session("h1", t0 + IDLE, IDLE).await.unwrap().unwrap();
    assert_eq!(seen.seen_ms, t0 + IDLE - 1);
    // Absolute: past `expires_ms`, however recently seen.
    b.touch_ui_session("h1", s.expires_ms - 1).await.unwrap();
    assert!(
        a.ui_session("h1", s.expires_ms - 1, IDLE)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(a.ui_session("h1", s.expires_ms, IDLE).await.unwrap(), None);
    // Sign-out on one replica ends it on the other.
    assert!(a.delete_ui_session("h1").await.unwrap());
    assert!(!a.delete_ui_session("h1").await.unwrap());
    assert_eq!(b.ui_session("h1", t0 + 2, IDLE).await.unwrap(), None);
    a.close().await;
    b.close().await;
}

on_both!(an_identity_keeps_its_newest_sessions_and_the_purge_drops_dead_ones);

async fn an_identity_keeps_its_newest_sessions_and_the_purge_drops_dead_ones(url: &str) {
    let store = Store::connect(url).await.unwrap();
    let t0 = 5_000_000;
    let n = MAX_SESSIONS_PER_IDENTITY + 2;
    for i in 0..n {
        store
            .create_ui_session(&session(&format!("s{i:02}"), "jwt:x:person:bo", t0 + i))
            .await
            .unwrap();
    }
    store
        .create_ui_session(&session("other", "token:person:cy", t0))
        .await
        .unwrap();
    // The two oldest of bo's are gone; cy's is untouched.
    for i in 0..n {
        let live = store
            .ui_session(&format!("s{i:02}"), t0 + n, IDLE)
            .await
            .unwrap()
            .is_some();
        assert_eq!(live, i >= 2, "session s{i:02}");
    }
    assert!(
        store
            .ui_session("other", t0 + 1, IDLE)
            .await
            .unwrap()
            .is_some()
    );
    // Every session idle past the timeout is purged; a fresh one stays.
    store
        .create_ui_session(&session("fresh", "token:person:dee", t0 + IDLE))
        .await
        .unwrap();
    let purged = store.purge_ui_sessions(t0 + IDLE + n, IDLE).await.unwrap();
    assert_eq!(
        purged,
        u64::try_from(MAX_SESSIONS_PER_IDENTITY).unwrap() + 1
    );
    assert!(
        store
            .ui_session("fresh", t0 + IDLE + n, IDLE)
            .await
            .unwrap()
            .is_some()
    );
    store.close().await;
}
