//! Sign-in throttling: at most `console.sign_in_rate` console sign-in attempts (10 a minute by
//! default, `ConsoleConfig::DEFAULT_SIGN_IN_RATE`) from one client address (an IPv6 client by its /64)
//! and for one presented identity (a JWT's unverified issuer and subject, else the token's
//! digest), counted in a fixed window per key; `off` counts nothing. The table is bounded: at
//! most [`MAX_KEYS`] keys; a new key past that first drops the windows that ended, then the
//! oldest one, so a flood of addresses costs memory it cannot grow (it can only make the
//! limiter forget its oldest counts early). The address is the connection's peer, unless the
//! peer is one of `console.trusted_proxies`: then it is the client its `X-Forwarded-For`
//! names ([`SignInLimiter::client`]); the header of any other peer is never read.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use corral_config::model::{Cidr, ConsoleConfig};
use sha2::{Digest, Sha256};

/// The limit that is no limit (`console.sign_in_rate: off`); a rate counts at least 1.
const OFF: u32 = 0;
/// The window of an `off` limiter (never read: it counts nothing).
pub(crate) const WINDOW_MS: i64 = 60 * 1000;
/// The most keys the table holds.
pub(crate) const MAX_KEYS: usize = 4096;

/// One key's window: when it started and how many attempts it counted.
#[derive(Debug, Clone, Copy)]
struct Window {
    start_ms: i64,
    count: u32,
}

/// The sign-in limiter (one per app).
#[derive(Debug)]
pub(crate) struct SignInLimiter {
    /// INVARIANT (bounded): never more than `max_keys` entries; `attempt` evicts before it
    /// inserts.
    windows: Mutex<HashMap<String, Window>>,
    /// Attempts per window and key; [`OFF`]: no limit.
    limit: AtomicU32,
    window_ms: i64,
    max_keys: usize,
    /// The proxies whose `X-Forwarded-For` names the client (`console.trusted_proxies`).
    trusted: Vec<Cidr>,
}

impl SignInLimiter {
    /// A limiter of `limit` attempts per `window_ms` per key, holding at most `max_keys` keys,
    /// trusting no proxy.
    pub(crate) fn new(limit: u32, window_ms: i64, max_keys: usize) -> Self {
        Self {
            windows: Mutex::new(HashMap::new()),
            limit: AtomicU32::new(limit),
            window_ms: window_ms.max(1),
            max_keys: max_keys.max(1),
            trusted: Vec::new(),
        }
    }

    /// The limiter `console:` asks for: its `sign_in_rate` (or none, `off`) and its
    /// `trusted_proxies`.
    pub(crate) fn from_config(console: &ConsoleConfig) -> Self {
        let (limit, window_ms) = console.sign_in_limit().map_or((OFF, WINDOW_MS), |r| {
            (
                r.count,
                i64::try_from(r.per.as_millis()).unwrap_or(i64::MAX),
            )
        });
        Self {
            trusted: console.trusted_proxies.clone(),
            ..Self::new(limit, window_ms, MAX_KEYS)
        }
    }

    /// The client a sign-in comes from: the connection's peer, or, when the peer is a trusted
    /// proxy, the rightmost address of `X-Forwarded-For` (every such header, in order) that is
    /// not itself a trusted proxy; walking left stops at an entry that is not an address, and
    /// the last trusted hop counts then. No trusted proxy configured: the header is not read.
    pub(crate) fn client(&self, peer: Option<SocketAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer.map(|p| p.ip())?;
        let trusted = |ip: IpAddr| self.trusted.iter().any(|c| c.contains(ip));
        if !trusted(peer) {
            return Some(peer);
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            let Some(ip) = forwarded_ip(hop) else {
                break;
            };
            client = ip;
            if !trusted(ip) {
                break;
            }
        }
        Some(client)
    }

    /// Sets the attempts a key may make in one window.
    pub(crate) fn set_limit(&self, limit: u32) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// Counts one attempt under every key at `now_ms`, or refuses it (counting nothing) with
    /// the seconds until the fullest key's window ends.
    pub(crate) fn attempt(&self, keys: &[String], now_ms: i64) -> Result<(), u64> {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = self.limit.load(Ordering::Relaxed);
        if limit == OFF {
            return Ok(());
        }
        let live = |w: &Window| now_ms.saturating_sub(w.start_ms) < self.window_ms;
        let mut wait_ms = 0i64;
        for k in keys {
            if let Some(w) = windows.get(k)
                && live(w)
                && w.count >= limit
            {
                wait_ms = wait_ms.max(w.start_ms.saturating_add(self.window_ms) - now_ms);
            }
        }
        if wait_ms > 0 {
            let secs = u64::try_from(wait_ms.saturating_add(999) / 1000).unwrap_or(1);
            return Err(secs.max(1));
        }
        for k in keys {
            match windows.get_mut(k) {
                Some(w) if live(w) => w.count = w.count.saturating_add(1),
                Some(w) => {
                    *w = Window {
                        start_ms: now_ms,
                        count: 1,
                    }
                }
                None => {
                    if windows.len() >= self.max_keys {
                        windows.retain(|_, w| live(w));
                    }
                    if windows.len() >= self.max_keys {
                        let oldest = windows
                            .iter()
                            .min_by_key(|(_, w)| w.start_ms)
                            .map(|(k, _)| k.clone());
                        if let Some(o) = oldest {
                            windows.remove(&o);
                        }
                    }
                    windows.insert(
                        k.clone(),
                        Window {
                            start_ms: now_ms,
                            count: 1,
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// How many keys the table holds now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The connection's peer address, when the server was started with it
/// (`into_make_service_with_connect_info`, as `corral serve` is).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub Option<SocketAddr>);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(a)| *a),
        ))
    }
}

/// An address as a proxy writes it in `X-Forwarded-For`: `1.2.3.4`, `2001:db8::1`, and
/// (some proxies) with a port, `1.2.3.4:5678` or `[2001:db8::1]:5678`.
fn forwarded_ip(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    hop.parse::<SocketAddr>().ok().map(|a| a.ip())
}

/// The keys of one sign-in attempt: the client's address (`unknown` when the server was not
/// told it) and the identity the token presents.
pub(crate) fn keys(client: Option<IpAddr>, token: &str) -> Vec<String> {
    let ip = match client {
        Some(IpAddr::V4(v4)) => format!("ip:{v4}"),
        Some(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => format!("ip:{v4}"),
            None => {
                let s = v6.segments();
                format!("ip:{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        None => "ip:unknown".to_owned(),
    };
    vec![ip, format!("id:{}", presented_identity(token))]
}

/// Who a token says it is, before anything checks it: a JWT's `iss` and `sub` (so fresh JWTs
/// for one subject share a count), else the token's SHA-256. Never the token itself.
fn presented_identity(token: &str) -> String {
    let claims = token
        .split('.')
        .nth(1)
        .filter(|_| token.split('.').count() == 3)
        .and_then(base64url)
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let named = claims.as_ref().and_then(|c| {
        let sub = c.get("sub")?.as_str()?;
        let iss = c.get("iss").and_then(|i| i.as_str()).unwrap_or("");
        Some(format!("jwt\0{iss}\0{sub}"))
    });
    let digest = Sha256::digest(named.as_deref().unwrap_or(token).as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Unpadded base64url, decoded; `None` if it is not.
fn base64url(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
        acc &= (1 << bits) - 1;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eleventh_attempt_in_a_window_is_refused_until_it_ends() {
        let l = SignInLimiter::new(10, 60_000, 100);
        let k = keys(Some([10, 0, 0, 1].into()), "t");
        for i in 0..10 {
            assert_eq!(l.attempt(&k, 1_000 + i), Ok(()));
        }
        assert_eq!(l.attempt(&k, 2_000), Err(59));
        assert_eq!(l.attempt(&k, 61_000), Ok(()));
    }

    #[test]
    fn one_identity_is_limited_across_addresses_and_one_address_across_tokens() {
        let l = SignInLimiter::new(2, 60_000, 100);
        let at = |ip: u8, tok: &str| keys(Some([10, 0, 0, ip].into()), tok);
        assert_eq!(l.attempt(&at(1, "a"), 0), Ok(()));
        assert_eq!(l.attempt(&at(2, "a"), 0), Ok(()));
        assert!(l.attempt(&at(3, "a"), 0).is_err());
        assert_eq!(l.attempt(&at(4, "b"), 0), Ok(()));
        assert_eq!(l.attempt(&at(4, "c"), 0), Ok(()));
        assert!(l.attempt(&at(4, "d"), 0).is_err());
    }

    #[test]
    fn the_table_never_holds_more_than_its_cap() {
        let l = SignInLimiter::new(10, 60_000, 64);
        for i in 0..10_000u32 {
            let ip = std::net::Ipv4Addr::from(i);
            let _ = l.attempt(&keys(Some(ip.into()), &i.to_string()), i64::from(i));
            assert!(l.len() <= 64, "{} keys after {i}", l.len());
        }
    }

    #[test]
    fn fresh_jwts_for_one_subject_share_a_key_and_an_ipv6_client_counts_by_its_64() {
        // {"iss":"i","sub":"ada","iat":1} and {"iss":"i","sub":"ada","iat":2}, unsigned.
        let a = "e30.eyJpc3MiOiJpIiwic3ViIjoiYWRhIiwiaWF0IjoxfQ.x";
        let b = "e30.eyJpc3MiOiJpIiwic3ViIjoiYWRhIiwiaWF0IjoyfQ.y";
        assert_eq!(keys(None, a)[1], keys(None, b)[1]);
        assert_ne!(keys(None, a)[1], keys(None, "e30.e30.z")[1]);
        let v6 = |last: u16| {
            let ip = std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 3, 4, 5, last);
            keys(Some(ip.into()), "t")[0].clone()
        };
        assert_eq!(v6(1), v6(2));
        assert_eq!(v6(1), "ip:2001:db8:1:2::/64");
        // Not base64, not JSON: the token's digest, no panic.
        for t in ["..", "a.%%.b", "a.b.c.d", "", "\u{0}"] {
            assert_eq!(keys(None, t).len(), 2);
        }
    }

    fn limiter(proxies: &[&str]) -> SignInLimiter {
        let trusted: Vec<Cidr> = proxies.iter().filter_map(|c| Cidr::parse(c).ok()).collect();
        assert_eq!(trusted.len(), proxies.len());
        SignInLimiter::from_config(&ConsoleConfig {
            sign_in_rate: None,
            trusted_proxies: trusted,
        })
    }

    #[test]
    fn forwarded_for_names_the_client_only_behind_a_trusted_proxy() {
        let check = |l: &SignInLimiter, peer: [u8; 4], xff: &[&'static str], expect: &str| {
            let mut h = HeaderMap::new();
            for v in xff {
                h.append("x-forwarded-for", axum::http::HeaderValue::from_static(v));
            }
            let got = l.client(Some((peer, 443).into()), &h);
            assert_eq!(
                got.map(|i| i.to_string()).as_deref(),
                Some(expect),
                "{xff:?}"
            );
        };
        // No trusted proxy: the header is never read.
        let none = limiter(&[]);
        check(&none, [10, 0, 0, 1], &["203.0.113.9"], "10.0.0.1");
        let l = limiter(&["10.0.0.0/8", "fd00::/8"]);
        // A peer outside the trusted networks: its header is ignored.
        check(&l, [198, 51, 100, 7], &["203.0.113.9"], "198.51.100.7");
        // Behind a trusted proxy: the rightmost untrusted hop, whatever a client prepended.
        check(&l, [10, 0, 0, 1], &["1.1.1.1, 203.0.113.9"], "203.0.113.9");
        check(
            &l,
            [10, 0, 0, 1],
            &["1.1.1.1", "203.0.113.9, 10.2.3.4"],
            "203.0.113.9",
        );
        check(&l, [10, 0, 0, 1], &["[2001:db8::1]:443"], "2001:db8::1");
        check(&l, [10, 0, 0, 1], &["203.0.113.9:5678"], "203.0.113.9");
        // Garbage stops the walk at the last trusted hop; no header: the proxy itself.
        check(
            &l,
            [10, 0, 0, 1],
            &["203.0.113.9, garbage, 10.9.9.9"],
            "10.9.9.9",
        );
        check(&l, [10, 0, 0, 1], &[], "10.0.0.1");
    }

    #[test]
    fn an_off_rate_counts_nothing_and_a_configured_one_is_kept() {
        let off = SignInLimiter::from_config(&ConsoleConfig {
            sign_in_rate: Some(corral_config::model::SignInRate::Off),
            trusted_proxies: Vec::new(),
        });
        let k = keys(None, "t");
        for i in 0..1000 {
            assert_eq!(off.attempt(&k, i), Ok(()));
        }
        assert_eq!(off.len(), 0);
        let two = SignInLimiter::from_config(&ConsoleConfig {
            sign_in_rate: Some(corral_config::model::SignInRate::Limit(
                corral_policy::units::Rate {
                    count: 2,
                    per: std::time::Duration::from_secs(1),
                },
            )),
            trusted_proxies: Vec::new(),
        });
        assert_eq!(two.attempt(&k, 0), Ok(()));
        assert_eq!(two.attempt(&k, 1), Ok(()));
        assert_eq!(two.attempt(&k, 2), Err(1));
        assert_eq!(two.attempt(&k, 1_000), Ok(()));
    }
}
