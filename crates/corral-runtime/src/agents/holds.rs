//! A session's held writes across replicas (issue 17): a turn's hold is kept in the store
//! before its `writes_held` event is (a hold the store could not keep is never announced as
//! one to apply), and an approved apply, on whichever replica it reaches, claims the hold in
//! the store, builds it again from its rows in a fresh directory of this replica's state
//! directory, and applies it in the session's sandbox. An applied hold's rows go; a hold not
//! applied whole stays `pending` for a person. The store is the truth: the turn's own
//! directory goes once its hold is kept (or refused).
//!
//! Exactly once: a hold is applied under a claim of the store's that one apply holds at a
//! time, refused while a turn of the session runs (on any replica) and holding off the next
//! turn meanwhile; its lease covers the apply's sandbox's whole time limit, renewed just before
//! it starts, so another replica claims it again only once this one died.

use std::path::Path;

use corral_agents::hold::{HoldBuilder, HoldReader, is_hold_id, remove_hold_dir};
use corral_agents::{APPLY_TIMEOUT, HoldApplied, Session, SessionEvent};
use corral_ops::OpError;
use corral_policy::codes;
use corral_store::agent_holds::MAX_HOLD_ENTRIES_READ;

use super::{AgentHost, TurnStart, now_ms, op_err, store_err};

/// How long a claim holds before its apply renews it (the hold is built again meanwhile).
const BUILD_LEASE_MS: i64 = 5 * 60 * 1000;
/// Margin over the apply's sandbox's time limit in the lease taken before it starts (clocks
/// of replicas disagree a little; the sandbox ends at its limit).
const APPLY_LEASE_MARGIN_MS: i64 = 5 * 60 * 1000;

fn agent_err(e: corral_agents::AgentError) -> OpError {
    OpError::new(e.code, e.message)
}

impl AgentHost {
    /// The event of a turn's `writes_held`: the same once its hold is kept in the store;
    /// otherwise an error saying why nothing of it is kept or will be applied. The hold's
    /// directory goes either way.
    pub(super) async fn announce_hold(&self, t: &TurnStart, event: SessionEvent) -> SessionEvent {
        let SessionEvent::WritesHeld { hold, .. } = &event else {
            return event;
        };
        let dir = self.holds_of(&t.record.id).join(hold);
        let kept = self.keep_hold(t, hold, &dir).await;
        if let Err(e) = remove_hold_dir(&dir) {
            tracing::warn!(session = %t.record.id, "a turn's hold directory was not removed: {e}");
        }
        match kept {
            Ok(()) => event,
            Err(e) => {
                tracing::warn!(session = %t.record.id, code = e.code, "a turn's held changes were not kept");
                SessionEvent::error(e.code, e.message)
            }
        }
    }

    /// Keeps the hold `hold` of a turn (its directory `dir`) in the store, whole or not at all.
    async fn keep_hold(&self, t: &TurnStart, hold: &str, dir: &Path) -> Result<(), OpError> {
        let mut writer = self
            .store
            .begin_hold(&t.tenant, &t.record.id, hold)
            .await
            .map_err(store_err)?;
        // One entry in memory at a time: the next file is read once the last is stored.
        for entry in HoldReader::new(dir) {
            let entry = entry.map_err(agent_err)?;
            writer.push(&entry).await.map_err(store_err)?;
        }
        writer.commit(now_ms()).await.map_err(store_err)?;
        Ok(())
    }

    /// Applies the stored hold `hold` of `t`'s session (a person approved the call) with the
    /// live `session`: claimed, built again, applied, then deleted (applied whole) or put back.
    pub(super) async fn apply_stored_hold(
        &self,
        t: &TurnStart,
        session: &Session,
        hold: &str,
    ) -> Result<HoldApplied, OpError> {
        let sid = &t.record.id;
        if !is_hold_id(hold) {
            return Err(op_err(
                codes::AGENTS_HOLD_NOT_FOUND,
                format!(
                    "session `{sid}` holds no changes `{hold}`: a hold's id is 32 hex digits, as the session's `writes_held` events name it"
                ),
            ));
        }
        let claim = uuid::Uuid::new_v4().simple().to_string();
        let now = now_ms();
        self.store
            .claim_hold(&t.tenant, sid, hold, &claim, now, now + BUILD_LEASE_MS)
            .await
            .map_err(store_err)?;
        let dir = self.holds_of(sid).join(format!("apply-{claim}"));
        let outcome = self.build_and_apply(t, session, hold, &claim, &dir).await;
        if let Err(e) = remove_hold_dir(&dir) {
            tracing::warn!(session = %sid, "an applied hold's directory was not removed: {e}");
        }
        let whole = matches!(&outcome, Ok(a) if a.whole);
        let ended = if whole {
            self.store.finish_hold(&t.tenant, sid, hold, &claim).await
        } else {
            self.store.release_hold(&t.tenant, sid, hold, &claim).await
        };
        match ended {
            Ok(true) => {}
            // Only past its lease, which outlives the sandbox: logged, the outcome stands.
            Ok(false) => {
                tracing::warn!(session = %sid, hold, "an apply's claim was gone when it ended")
            }
            Err(e) => {
                tracing::warn!(session = %sid, hold, code = e.code(), "an apply's claim was not ended: {e}")
            }
        }
        outcome
    }

    /// Builds the claimed hold in `dir` from its rows, renews the claim for the apply's whole
    /// time limit, and applies it.
    async fn build_and_apply(
        &self,
        t: &TurnStart,
        session: &Session,
        hold: &str,
        claim: &str,
        dir: &Path,
    ) -> Result<HoldApplied, OpError> {
        let (tenant, sid) = (&t.tenant, &t.record.id);
        let mut builder = HoldBuilder::new(dir).map_err(agent_err)?;
        let mut after = 0;
        loop {
            let page = self
                .store
                .hold_entries(tenant, sid, hold, claim, after, MAX_HOLD_ENTRIES_READ)
                .await
                .map_err(store_err)?;
            let Some((last, _)) = page.last() else { break };
            after = *last;
            for (_, entry) in &page {
                builder.push(entry).map_err(agent_err)?;
            }
        }
        let built = builder.finish().map_err(agent_err)?;
        let limit = i64::try_from(APPLY_TIMEOUT.as_millis()).unwrap_or(i64::MAX);
        let lease = now_ms().saturating_add(limit + APPLY_LEASE_MARGIN_MS);
        if !self
            .store
            .renew_hold(tenant, sid, hold, claim, lease)
            .await
            .map_err(store_err)?
        {
            return Err(op_err(
                codes::AGENTS_HOLD_APPLYING,
                format!(
                    "session `{sid}`'s hold `{hold}` was claimed again by another apply, or a turn started, while it was being built; nothing was applied: wait for the session's `writes_applied` or `agent.session.idle` event and try again"
                ),
            ));
        }
        session.apply_hold(hold, &built).await.map_err(agent_err)
    }
}
