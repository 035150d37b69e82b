//! Rate and concurrency limits per (principal, op): a token bucket and an in-flight counter.
//! State is per replica; budgets shared across replicas belong to the guardrails' ledger.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corral_policy::Limits;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
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
    buckets: Mutex<HashMap<(String, String), Bucket>>,
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
            let b = buckets.entry(key.clone()).or_insert(Bucket {
                tokens: capacity,
                last: now,
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
