//! A run's model-call lease (`budgets.tokens`): one model call in flight per run, across every
//! replica sharing the run store, held by the call while it runs and renewed in the background.

use std::sync::Arc;
use std::time::Duration;

use crate::runs::{
    MODEL_CALL_LEASE, MODEL_CALL_RENEW, RunKey, RunPurpose, RunStore, RunStoreError,
};

/// A run, owned (a lease outlives the borrowed key of its call's chain).
#[derive(Debug, Clone)]
struct OwnedKey {
    tenant: String,
    principal: String,
    purpose: RunPurpose,
    run_id: String,
}

impl OwnedKey {
    fn of(k: &RunKey<'_>) -> Self {
        Self {
            tenant: k.tenant.to_owned(),
            principal: k.principal.to_owned(),
            purpose: k.purpose,
            run_id: k.run_id.to_owned(),
        }
    }

    fn key(&self) -> RunKey<'_> {
        RunKey {
            tenant: &self.tenant,
            principal: &self.principal,
            purpose: self.purpose,
            run_id: &self.run_id,
        }
    }
}

/// The lease one call holds on its run's model calls. [`RunLease::release`] gives it back
/// when the call ended; dropped unreleased (the call was cancelled), it is given back on a
/// task of its own. Until then a task renews it every [`MODEL_CALL_RENEW`], so it lapses
/// ([`MODEL_CALL_LEASE`]) only when this process is gone.
#[derive(Debug)]
pub(crate) struct RunLease {
    store: Arc<dyn RunStore>,
    key: OwnedKey,
    /// Unique to this call: no other call, on any replica, can renew or release the lease.
    holder: String,
    renewer: Option<tokio::task::JoinHandle<()>>,
    released: bool,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl RunLease {
    /// The run's lease for a new holder, `None` while another call holds it, or the store's
    /// error (the caller refuses: fail closed).
    pub(crate) async fn take(
        store: &Arc<dyn RunStore>,
        key: &RunKey<'_>,
        now_ms: i64,
    ) -> Result<Option<Self>, RunStoreError> {
        let holder = uuid::Uuid::new_v4().to_string();
        let expires = now_ms.saturating_add(ms(MODEL_CALL_LEASE));
        if !store
            .lease_model_call(key, &holder, now_ms, expires)
            .await?
        {
            return Ok(None);
        }
        let key = OwnedKey::of(key);
        let renewer = {
            let store = Arc::clone(store);
            let key = key.clone();
            let holder = holder.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(MODEL_CALL_RENEW).await;
                    let expires = crate::now_ms().saturating_add(ms(MODEL_CALL_LEASE));
                    match store.renew_model_call(&key.key(), &holder, expires).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(run = %key.run_id, "a run's model-call lease lapsed while its call ran");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(run = %key.run_id, error = %e, "a run's model-call lease was not renewed");
                        }
                    }
                }
            })
        };
        Ok(Some(Self {
            store: Arc::clone(store),
            key,
            holder,
            renewer: Some(renewer),
            released: false,
        }))
    }

    /// Gives the lease back, before the call's answer leaves: the run's next call finds it
    /// free.
    pub(crate) async fn release(mut self) {
        self.released = true;
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        if let Err(e) = self
            .store
            .release_model_call(&self.key.key(), &self.holder)
            .await
        {
            tracing::warn!(run = %self.key.run_id, error = %e, "a run's model-call lease was not released; it lapses on its own");
        }
    }
}

impl Drop for RunLease {
    fn drop(&mut self) {
        if let Some(r) = self.renewer.take() {
            r.abort();
        }
        if self.released {
            return;
        }
        let (store, key, holder) = (
            Arc::clone(&self.store),
            self.key.clone(),
            std::mem::take(&mut self.holder),
        );
        // Outside a runtime nothing can be awaited: the lease lapses on its own.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.release_model_call(&key.key(), &holder).await;
            });
        }
    }
}
