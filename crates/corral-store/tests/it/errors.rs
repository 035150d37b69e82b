//! Bad URLs and unreachable servers: `store.unavailable`, and never the password.

use corral_store::{STORE_UNAVAILABLE, Store, StoreError};

const SECRET: &str = "Sup3rSecretPassw0rd";

async fn unavailable(url: &str) -> StoreError {
    let err = Store::connect(url).await.unwrap_err();
    assert_eq!(err.code(), STORE_UNAVAILABLE, "{url}: {err}");
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(SECRET), "{url}: password leaked: {text}");
        assert!(
            !text.contains("p@ss"),
            "{url}: decoded password leaked: {text}"
        );
    }
    assert!(!err.fix().is_empty());
    eprintln!("{url:?} -> {err}");
    err
}

#[tokio::test]
async fn unreachable_postgres() {
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let err = unavailable(&format!("postgres://corral:{SECRET}@127.0.0.1:1/corral")).await;
    let text = err.to_string();
    assert!(
        text.contains("postgres://corral@127.0.0.1:1/corral"),
        "{text}"
    );
}

#[tokio::test]
async fn password_in_the_query_string() {
    unavailable(&format!(
        "postgresql://corral@127.0.0.1:1/corral?password={SECRET}"
    ))
    .await;
}

#[tokio::test]
async fn percent_encoded_password() {
    let err = unavailable("postgres://corral:p%40ssSup3r@127.0.0.1:1/corral").await;
    assert!(!err.to_string().contains("p%40ssSup3r"), "{err}");
}

#[tokio::test]
async fn unparseable_postgres_url() {
    unavailable(&format!("postgres://corral:{SECRET}@[::1/corral")).await;
    unavailable(&format!(
        "postgres://corral:{SECRET}@127.0.0.1:notaport/corral"
    ))
    .await;
}

#[tokio::test]
async fn unsupported_schemes() {
    unavailable(&format!("mysql://corral:{SECRET}@127.0.0.1/corral")).await;
    unavailable("").await;
    unavailable("just some words").await;
    unavailable("sqlite::memory:").await;
}

#[tokio::test]
async fn bad_sqlite_paths() {
    unavailable("sqlite://").await;
    unavailable("sqlite://:memory:").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    // The parent "directory" is a regular file.
    unavailable(&format!("sqlite://{}/corral.db", file.display())).await;
    // The file is not a database.
    let err = unavailable(&format!("sqlite://{}", file.display())).await;
    assert!(err.to_string().contains("a-file"), "{err}");
}
