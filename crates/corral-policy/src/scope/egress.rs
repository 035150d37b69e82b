//! `network:` of a sandboxed program: `none`, `loopback`, or an egress allow-list of
//! `host:port` entries that corral's proxy checks for every connection the program asks for.
//!
//! Semantics, in one place (the proxy in corral-exec applies them; docs/egress.md states them):
//!
//! - an entry is `host:port` with an exact port: `api.github.com:443`, `*.pypi.org:443` (any
//!   subdomain of `pypi.org`, not `pypi.org` itself), `203.0.113.7:8080`, `[2001:db8::1]:443`;
//! - a name matches case-insensitively, without a trailing dot;
//! - the proxy resolves a name once and connects to exactly the address it checked;
//! - an internal address (loopback, private, link-local, CGNAT, multicast, unspecified, cloud
//!   metadata: see [`is_private_ip`]) is refused unless the entry that admitted the connection is
//!   that very IP address. A host *name* never admits an internal address, not even `localhost`:
//!   whoever controls a name's DNS (or the resolver) could point it anywhere, so a rule that
//!   means to reach `127.0.0.1:8080` writes `127.0.0.1:8080`.

use std::fmt;
use std::net::IpAddr;

use super::url::is_private_ip;

/// Most entries one allow-list may have.
pub const MAX_EGRESS_ENTRIES: usize = 256;

/// The network a sandboxed program gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkSpec {
    /// A network namespace with nothing in it.
    None,
    /// A network namespace with only loopback up.
    Loopback,
    /// A network namespace whose only way out is corral's egress proxy, admitting these entries.
    Allow(EgressAllowList),
}

impl NetworkSpec {
    /// As written, in one line: `none`, `loopback` or `allow: a:443, *.b.org:443`.
    pub fn summary(&self) -> String {
        match self {
            NetworkSpec::None => "none".to_owned(),
            NetworkSpec::Loopback => "loopback".to_owned(),
            NetworkSpec::Allow(l) => {
                let entries: Vec<&str> = l.entries().iter().map(|e| e.written.as_str()).collect();
                format!("allow: {}", entries.join(", "))
            }
        }
    }
}

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any subdomain of this name (written `*.name`).
    Subdomains(String),
    /// Exactly this address.
    Ip(IpAddr),
}

/// One `host:port` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEntry {
    host: HostPattern,
    port: u16,
    written: String,
}

impl fmt::Display for EgressEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// Why an entry was refused at load time: the message says what and how to write it instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}` is not a valid egress entry: {why}")]
pub struct EgressEntryError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong and how to write it.
    pub why: String,
}

/// A compiled allow-list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressAllowList {
    entries: Vec<EgressEntry>,
}

/// Why the proxy refused a connection (before or after resolving the name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressRefusal {
    /// No entry names this host and port.
    NotAllowed,
    /// The name resolved to an internal address no entry names.
    Internal(IpAddr),
}

impl fmt::Display for EgressRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressRefusal::NotAllowed => {
                f.write_str("no entry of the allow-list names this host and port")
            }
            EgressRefusal::Internal(ip) => write!(
                f,
                "it resolves to the internal address {ip}, which only an entry naming that address admits"
            ),
        }
    }
}

/// Lowercase, no trailing dot, only letters, digits, `-` and `.` in non-empty labels.
fn valid_name(name: &str) -> Result<String, String> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() || name.len() > 253 {
        return Err("the host is empty or longer than 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("a label of the host is empty or longer than 63 characters".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "the label `{label}` has a character other than letters, digits, `-` and `_` (write `*.` only as the first label, for subdomains)"
            ));
        }
    }
    Ok(name)
}

impl EgressEntry {
    /// Parses `host:port`, `*.domain:port`, `1.2.3.4:port` or `[v6]:port`.
    pub fn parse(written: &str) -> Result<Self, EgressEntryError> {
        let err = |why: &str| EgressEntryError {
            entry: written.to_owned(),
            why: why.to_owned(),
        };
        let s = written.trim();
        if s.contains("://") || s.contains('/') {
            return Err(err(
                "write `host:port` without a scheme or path, e.g. `api.github.com:443`",
            ));
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let Some((v6, port)) = rest.split_once("]:") else {
                return Err(err("write an IPv6 address as `[2001:db8::1]:443`"));
            };
            (v6, port)
        } else {
            let Some((host, port)) = s.rsplit_once(':') else {
                return Err(err(
                    "the port is missing: write `host:port`, e.g. `api.github.com:443`",
                ));
            };
            if host.contains(':') {
                return Err(err(
                    "write an IPv6 address in brackets, as `[2001:db8::1]:443`",
                ));
            }
            (host, port)
        };
        let port: u16 = match port.parse() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(err(
                    "the port must be one number from 1 to 65535 (no ranges, no `*`)",
                ));
            }
        };
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Ip(ip)
        } else if s.starts_with('[') {
            return Err(err("the bracketed host is not an IPv6 address"));
        } else if let Some(domain) = host.strip_prefix("*.") {
            let domain = valid_name(domain).map_err(|w| err(&w))?;
            if !domain.contains('.') {
                return Err(err(
                    "`*.` needs a domain with at least two labels, e.g. `*.pypi.org:443`",
                ));
            }
            HostPattern::Subdomains(domain)
        } else if host.contains('*') {
            return Err(err(
                "`*` is only allowed as a whole first label (`*.example.com:443`)",
            ));
        } else {
            HostPattern::Name(valid_name(host).map_err(|w| err(&w))?)
        };
        Ok(EgressEntry {
            host,
            port,
            written: s.to_owned(),
        })
    }

    fn matches(&self, host: &Host, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(n), Host::Name(h)) => n == h,
            (HostPattern::Subdomains(d), Host::Name(h)) => h
                .strip_suffix(d.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            (HostPattern::Ip(a), Host::Ip(b)) => a == b,
            (HostPattern::Name(_) | HostPattern::Subdomains(_), Host::Ip(_))
            | (HostPattern::Ip(_), Host::Name(_)) => false,
        }
    }
}

/// A host as a program asked for it.
enum Host {
    Name(String),
    Ip(IpAddr),
}

fn host_of(host: &str) -> Option<Host> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(Host::Ip(ip));
    }
    valid_name(host).ok().map(Host::Name)
}

impl EgressAllowList {
    /// Compiles the entries; every bad one is reported.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, Vec<EgressEntryError>> {
        let mut ok = Vec::new();
        let mut errors = Vec::new();
        for e in entries {
            match EgressEntry::parse(e.as_ref()) {
                Ok(entry) => ok.push(entry),
                Err(err) => errors.push(err),
            }
        }
        if ok.len() > MAX_EGRESS_ENTRIES {
            errors.push(EgressEntryError {
                entry: format!("{} entries", ok.len()),
                why: format!("an allow-list holds at most {MAX_EGRESS_ENTRIES} entries"),
            });
        }
        if errors.is_empty() {
            Ok(Self { entries: ok })
        } else {
            Err(errors)
        }
    }

    /// The entries.
    pub fn entries(&self) -> &[EgressEntry] {
        &self.entries
    }

    /// The first entry naming `host` (a name, or an IP literal with or without brackets) and
    /// `port`, before any resolution.
    pub fn admit(&self, host: &str, port: u16) -> Result<&EgressEntry, EgressRefusal> {
        let host = host_of(host).ok_or(EgressRefusal::NotAllowed)?;
        self.entries
            .iter()
            .find(|e| e.matches(&host, port))
            .ok_or(EgressRefusal::NotAllowed)
    }

    /// Whether the proxy may connect to `addr` for a connection `entry` admitted: a public
    /// address always, an internal one only when `entry` is that very address.
    pub fn address_ok(entry: &EgressEntry, addr: IpAddr) -> Result<(), EgressRefusal> {
        let named = matches!(entry.host, HostPattern::Ip(ip) if ip == addr);
        if is_private_ip(addr) && !named {
            return Err(EgressRefusal::Internal(addr));
        }
        Ok(())
    }
}
