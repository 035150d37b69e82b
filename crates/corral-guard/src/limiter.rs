//! Rate and concurrency limits per (principal, op): a token bucket and an in-flight counter.
//! State is per replica; budgets shared across replicas belong to the guardrails' ledger.
//! A bucket that has refilled to its capacity is the same as no bucket, so idle ones are
//! dropped (an amortized sweep whenever the map has doubled since the last one): the map holds
//! only the keys that called within their refill time, not every JWT subject ever seen. An
//! in-flight counter is removed when its last permit is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_policy::Limits;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    /// When it is full again if nothing takes from it: from then on it is the same as no bucket.
    full_at: Instant,
}

/// The buckets, and the size at which the next sweep of full ones runs.
#[derive(Debug)]
struct Buckets {
    map: HashMap<(String, String), Bucket>,
    sweep_at: usize,
}

/// The fewest buckets at which sweeping starts.
const MIN_SWEEP: usize = 1024;

impl Default for Buckets {
    fn default() -> Self {
        Buckets {
            map: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl Buckets {
    /// Drops every bucket that is full by `now`, once the map has doubled since the last sweep
    /// (so each insert pays O(1) amortized).
    fn sweep_if_due(&mut self, now: Instant) {
        if self.map.len() < self.sweep_at {
            return;
        }
        self.map.retain(|_, b| b.full_at > now);
        self.sweep_at = (self.map.len() * 2).max(MIN_SWEEP);
    }
}

/// Why a call was limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// Over the rate; retry after this long.
    Rate {
        /// When a token is next available.
        retry_after: Duration,
        /// The limit, e.g. `10/min`.
        limit: corral_policy::units::Rate,
    },
    /// Too many calls in flight.
    Concurrency {
        /// The limit.
        limit: u32,
    },
}

/// Limits per (principal, op).
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<Buckets>,
    in_flight: Arc<Mutex<HashMap<(String, String), u32>>>,
}

/// Holds a concurrency slot; releasing happens on drop.
#[derive(Debug)]
pub struct Permit {
    key: Option<(String, String)>,
    in_flight: Arc<Mutex<HashMap<(String, String), u32>>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(key) = self.key.take()
            && let Ok(mut m) = self.in_flight.lock()
            && let Some(n) = m.get_mut(&key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&key);
            }
        }
    }
}

impl Limiter {
    /// How many (principal, op) keys the limiter holds state for: rate buckets not yet swept,
    /// and calls in flight.
    pub fn tracked(&self) -> usize {
        let buckets = self.buckets.lock().map_or(0, |b| b.map.len());
        let in_flight = self.in_flight.lock().map_or(0, |m| m.len());
        buckets + in_flight
    }

    /// Admits a call under `limits`, or says which limit refused it.
    pub fn admit(&self, principal: &str, op: &str, limits: &Limits) -> Result<Permit, Limited> {
        if limits.rate.is_none() && limits.concurrency.is_none() {
            // Nothing to count: no key, no lock.
            return Ok(Permit {
                key: None,
                in_flight: self.in_flight.clone(),
            });
        }
        let key = (principal.to_owned(), op.to_owned());
        if let Some(rate) = limits.rate {
            let capacity = f64::from(rate.count);
            let per_sec = capacity / rate.per.as_secs_f64().max(1e-9);
            let now = Instant::now();
            let mut buckets = self.buckets.lock().map_err(|_| Limited::Rate {
                retry_after: Duration::from_secs(1),
                limit: rate,
            })?;
            buckets.sweep_if_due(now);
            let b = buckets.map.entry(key.clone()).or_insert(Bucket {
                tokens: capacity,
                last: now,
                full_at: now,
            });
            b.tokens =
                (b.tokens + now.duration_since(b.last).as_secs_f64() * per_sec).min(capacity);
            b.last = now;
            if b.tokens < 1.0 {
                let wait = (1.0 - b.tokens) / per_sec;
                return Err(Limited::Rate {
                    retry_after: Duration::from_secs_f64(wait.max(0.001)),
                    limit: rate,
                });
            }
            b.tokens -= 1.0;
            b.full_at = now + Duration::from_secs_f64(((capacity - b.tokens) / per_sec).min(1e9));
        }
        match limits.concurrency {
            None => Ok(Permit {
                key: None,
                in_flight: self.in_flight.clone(),
            }),
            Some(max) => {
                let mut m = self
                    .in_flight
                    .lock()
                    .map_err(|_| Limited::Concurrency { limit: max })?;
                let n = m.entry(key.clone()).or_insert(0);
                if *n >= max {
                    return Err(Limited::Concurrency { limit: max });
                }
                *n += 1;
                Ok(Permit {
                    key: Some(key),
                    in_flight: self.in_flight.clone(),
                })
            }
        }
    }
}
