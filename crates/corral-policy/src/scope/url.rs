//! `UrlScope`: which urls an op may reach. The canonical (WHATWG-parsed) url is checked, never
//! the raw string.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use url::{Host, Url};

use crate::codes;
use crate::error::PolicyError;

/// How a url scope is written: the input of `UrlScope::compile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlScopeSpec {
    /// Hosts: `example.com` exactly, or `*.example.com` for its subdomains (not the apex).
    pub hosts: Vec<String>,
    /// Schemes; `None` means `https` for an allow and any for a deny.
    pub schemes: Option<Vec<String>>,
    /// Ports; `None` means the scheme's default port for an allow and any for a deny.
    pub ports: Option<Vec<u16>>,
    /// Path globs; `None` means `/**`.
    pub paths: Option<Vec<String>>,
    /// Refuse loopback, private, link-local, CGNAT and other internal addresses.
    pub block_private: bool,
    /// HTTP methods (upper case); `None` means `GET` and `HEAD` for an allow and any for a
    /// deny.
    pub methods: Option<Vec<String>>,
}

impl Default for UrlScopeSpec {
    fn default() -> Self {
        Self {
            hosts: Vec::new(),
            schemes: None,
            ports: None,
            paths: None,
            block_private: true,
            methods: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    Subdomains(String),
}

/// A compiled url scope.
#[derive(Debug, Clone)]
pub struct UrlScope {
    spec: UrlScopeSpec,
    hosts: Vec<HostPattern>,
    paths: Option<GlobSet>,
}

/// Why a url was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlRefusal {
    /// Not a url corral can check (no host, credentials in it, not http/https-like).
    Invalid,
    /// Scheme, host, port or path outside the scope.
    NotAllowed,
    /// An internal address while `block_private` is on.
    Private,
    /// An HTTP method outside the scope's `methods`.
    Method,
}

impl UrlRefusal {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            UrlRefusal::Invalid => codes::POLICY_ARG_INVALID,
            UrlRefusal::NotAllowed => codes::POLICY_URL_NOT_ALLOWED,
            UrlRefusal::Private => codes::POLICY_PRIVATE_ADDRESS,
            UrlRefusal::Method => codes::POLICY_METHOD_NOT_ALLOWED,
        }
    }
}

/// A url the scope accepted, in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlGrant {
    /// The canonical url.
    pub url: String,
    /// Whether the fetcher must re-check resolved addresses against the private ranges.
    pub block_private: bool,
}

/// Whether an address is internal: unspecified, loopback, private (RFC 1918), link-local
/// (including 169.254.169.254), CGNAT (100.64/10), benchmarking, multicast, broadcast,
/// reserved, IPv6 unique-local (fc00::/7), site-local, Teredo, NAT64 local-use and discard,
/// documentation (2001:db8::/32, 3fff::/20) and benchmarking (2001:2::/48),
/// and IPv4 embedded in IPv6 (mapped, compatible, translated, NAT64, 6to4) by its IPv4 address.
pub fn is_private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || a >= 240
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_private_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d), IPv4-translated (SIIT, ::ffff:0:a.b.c.d) and NAT64
    // (64:ff9b::/96) carry an IPv4 address at the end.
    if seg[..6] == [0, 0, 0, 0, 0, 0]
        || seg[..6] == [0, 0, 0, 0, 0xffff, 0]
        || seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        let o = ip.octets();
        return is_private_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    // 6to4 (2002::/16) routes to the IPv4 address in its second and third groups.
    if seg[0] == 0x2002 {
        let o = ip.octets();
        return is_private_v4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    // Teredo (2001::/32) tunnels to an IPv4 address a relay picks; the NAT64 local-use prefix
    // (64:ff9b:1::/48) and the discard prefix (100::/64) never lead to a public host.
    if (seg[0] == 0x2001 && seg[1] == 0)
        || (seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1)
        || seg[..4] == [0x100, 0, 0, 0]
    {
        return true;
    }
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00
        || (seg[0] & 0xffc0) == 0xfe80
        || (seg[0] & 0xffc0) == 0xfec0
        || seg[0] == 0x2001 && seg[1] == 0x0db8
        // Documentation (3fff::/20, RFC 9637) and benchmarking (2001:2::/48), as for IPv4.
        || seg[0] == 0x3fff && seg[1] < 0x1000
        || seg[..3] == [0x2001, 2, 0]
}

fn is_internal_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.ends_with(".local")
        || host.ends_with(".internal")
        || !host.contains('.')
}

/// The HTTP methods a url scope may name.
pub const HTTP_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// The methods an allow rule's url scope admits when it names none: reads only.
pub const DEFAULT_METHODS: [&str; 2] = ["GET", "HEAD"];

impl UrlScope {
    /// Validates and compiles a url scope (its `methods` upper-cased).
    pub fn compile(mut spec: UrlScopeSpec) -> Result<Self, PolicyError> {
        let bad = |what: String, fix: &str| PolicyError::InvalidScope {
            what,
            fix: fix.to_owned(),
        };
        if let Some(methods) = &mut spec.methods {
            for m in methods.iter_mut() {
                let upper = m.to_ascii_uppercase();
                if !HTTP_METHODS.contains(&upper.as_str()) {
                    return Err(bad(
                        format!("`{m}` is not an HTTP method a url scope may name"),
                        &format!("write some of {}", HTTP_METHODS.join(", ")),
                    ));
                }
                *m = upper;
            }
        }
        let mut hosts = Vec::new();
        for h in &spec.hosts {
            let lower = h.to_ascii_lowercase();
            if let Some(ip) = lower
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix(']'))
                .and_then(|x| x.parse::<Ipv6Addr>().ok())
            {
                hosts.push(HostPattern::Exact(ip.to_string()));
                continue;
            }
            let (pat, name) = match lower.strip_prefix("*.") {
                Some(rest) => (HostPattern::Subdomains(rest.to_owned()), rest),
                None => (HostPattern::Exact(lower.clone()), lower.as_str()),
            };
            if name.is_empty() || name.contains(['*', '/', ':', '@', ' ']) {
                return Err(bad(
                    format!("host `{h}` is not a host name"),
                    "write `example.com`, or `*.example.com` for its subdomains",
                ));
            }
            hosts.push(pat);
        }
        let paths = match &spec.paths {
            None => None,
            Some(ps) => {
                let mut b = GlobSetBuilder::new();
                for p in ps {
                    if !p.starts_with('/') {
                        return Err(bad(
                            format!("url path pattern `{p}` does not start with `/`"),
                            "write a path glob such as `/api/**`",
                        ));
                    }
                    b.add(
                        GlobBuilder::new(p)
                            .literal_separator(true)
                            .build()
                            .map_err(|e| {
                                bad(
                                    format!(
                                        "url path pattern `{p}` is not a valid glob: {}",
                                        e.kind()
                                    ),
                                    "write a path glob such as `/api/**`",
                                )
                            })?,
                    );
                }
                Some(
                    b.build()
                        .map_err(|e| bad(format!("{e}"), "simplify the path patterns"))?,
                )
            }
        };
        Ok(Self { spec, hosts, paths })
    }

    /// The scope as written.
    pub fn spec(&self) -> &UrlScopeSpec {
        &self.spec
    }

    fn host_matches(&self, host: &str) -> bool {
        self.hosts.iter().any(|p| match p {
            HostPattern::Exact(h) => h == host,
            HostPattern::Subdomains(apex) => host
                .strip_suffix(apex.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        })
    }

    fn parse(raw: &str) -> Result<(Url, String), UrlRefusal> {
        let url = Url::parse(raw).map_err(|_| UrlRefusal::Invalid)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlRefusal::Invalid);
        }
        let host = match url.host() {
            Some(Host::Domain(d)) => d.trim_end_matches('.').to_ascii_lowercase(),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(UrlRefusal::Invalid),
        };
        Ok((url, host))
    }

    fn path_matches(&self, url: &Url) -> bool {
        self.paths.as_ref().is_none_or(|g| g.is_match(url.path()))
    }

    /// The methods an allow rule with this scope admits.
    pub fn allowed_methods(&self) -> Vec<&str> {
        match &self.spec.methods {
            Some(m) => m.iter().map(String::as_str).collect(),
            None => DEFAULT_METHODS.to_vec(),
        }
    }

    /// Checks a url, fetched with `method`, for an allow rule.
    pub fn check(&self, raw: &str, method: &str) -> Result<UrlGrant, UrlRefusal> {
        let (url, host) = Self::parse(raw)?;
        let scheme_ok = match &self.spec.schemes {
            None => url.scheme() == "https",
            Some(s) => s.iter().any(|x| x == url.scheme()),
        };
        let port = url.port_or_known_default().ok_or(UrlRefusal::Invalid)?;
        let port_ok = match &self.spec.ports {
            None => url.port().is_none(),
            Some(p) => p.contains(&port),
        };
        if !scheme_ok || !port_ok || !self.host_matches(&host) || !self.path_matches(&url) {
            return Err(UrlRefusal::NotAllowed);
        }
        if !self
            .allowed_methods()
            .iter()
            .any(|m| m.eq_ignore_ascii_case(method))
        {
            return Err(UrlRefusal::Method);
        }
        if self.spec.block_private {
            let internal = match url.host() {
                Some(Host::Ipv4(ip)) => is_private_v4(ip),
                Some(Host::Ipv6(ip)) => is_private_v6(ip),
                Some(Host::Domain(_)) => is_internal_name(&host),
                None => true,
            };
            if internal {
                return Err(UrlRefusal::Private);
            }
        }
        Ok(UrlGrant {
            url: url.to_string(),
            block_private: self.spec.block_private,
        })
    }

    /// For a deny rule: whether the url's host matches (and its scheme, port, path and
    /// method, where the deny rule names them). An unparsable url is covered: a failing check
    /// denies.
    pub fn covers(&self, raw: &str, method: &str) -> bool {
        let Ok((url, host)) = Self::parse(raw) else {
            return true;
        };
        (self.hosts.is_empty() || self.host_matches(&host))
            && self
                .spec
                .schemes
                .as_ref()
                .is_none_or(|s| s.iter().any(|x| x == url.scheme()))
            && self
                .spec
                .ports
                .as_ref()
                .is_none_or(|p| url.port_or_known_default().is_some_and(|x| p.contains(&x)))
            && self.path_matches(&url)
            && self.spec.methods.as_ref().is_none_or(|m| {
                // A server answers `HEAD` with its `GET` handler: a deny of `GET` covers both.
                m.iter().any(|x| {
                    x.eq_ignore_ascii_case(method)
                        || (x == "GET" && method.eq_ignore_ascii_case("HEAD"))
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(hosts: &[&str]) -> UrlScope {
        let spec = UrlScopeSpec {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            ..UrlScopeSpec::default()
        };
        match UrlScope::compile(spec) {
            Ok(s) => s,
            Err(e) => unreachable!("test scope is valid: {e}"),
        }
    }

    #[test]
    fn subdomain_wildcards_need_the_star_dot_form() {
        let s = scope(&["*.example.com", "api.test.org"]);
        assert!(s.check("https://a.example.com/x", "GET").is_ok());
        assert!(s.check("https://a.b.example.com/", "GET").is_ok());
        assert_eq!(
            s.check("https://example.com/", "GET"),
            Err(UrlRefusal::NotAllowed)
        );
        assert_eq!(
            s.check("https://evilexample.com/", "GET"),
            Err(UrlRefusal::NotAllowed)
        );
        assert!(s.check("https://API.test.org/", "GET").is_ok());
        assert_eq!(
            s.check("https://x.api.test.org/", "GET"),
            Err(UrlRefusal::NotAllowed)
        );
    }

    #[test]
    fn scheme_port_and_credentials_are_checked_on_the_canonical_url() {
        let s = scope(&["example.com"]);
        assert_eq!(
            s.check("http://example.com/", "GET"),
            Err(UrlRefusal::NotAllowed)
        );
        assert_eq!(
            s.check("https://example.com:8443/", "GET"),
            Err(UrlRefusal::NotAllowed)
        );
        assert!(s.check("https://example.com:443/", "GET").is_ok());
        assert_eq!(
            s.check("https://user:pw@example.com/", "GET"),
            Err(UrlRefusal::Invalid)
        );
        assert_eq!(
            s.check("https://example.com@evil.com/", "GET"),
            Err(UrlRefusal::Invalid)
        );
        assert_eq!(s.check("not a url", "GET"), Err(UrlRefusal::Invalid));
    }

    #[test]
    fn private_addresses_are_blocked_in_every_spelling() {
        let s = scope(&[
            "127.0.0.1",
            "2130706433",
            "169.254.169.254",
            "[::ffff:10.0.0.1]",
            "localhost",
            "100.64.0.1",
        ]);
        for u in [
            "https://127.0.0.1/",
            "https://2130706433/",
            "https://0x7f.0.0.1/",
            "https://169.254.169.254/",
            "https://[::ffff:10.0.0.1]/",
            "https://localhost/",
            "https://100.64.0.1/",
        ] {
            assert_ne!(s.check(u, "GET").map(|_| ()), Ok(()), "{u} must be refused");
        }
        assert!(is_private_ip(
            "fd00::1".parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
        ));
        assert!(!is_private_ip(IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34))));
    }

    #[test]
    fn ipv6_tunnel_and_translation_prefixes_count_by_where_they_lead() {
        let ip = |s: &str| {
            s.parse::<IpAddr>()
                .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        };
        // 6to4 of 127.0.0.1, 10.0.0.1 and 169.254.169.254: internal, like the IPv4 address.
        for internal in [
            "2002:7f00:1::1",
            "2002:a00:1::",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "64:ff9b:1::a00:1",
            "100::1",
            // Found by the session-3 attack: the IPv4-translated form (SIIT) of 127.0.0.1 and
            // 169.254.169.254, IPv6 benchmarking and the new documentation prefix passed.
            "::ffff:0:7f00:1",
            "::ffff:0:a9fe:a9fe",
            "2001:2::1",
            "3fff:fff::1",
        ] {
            assert!(is_private_ip(ip(internal)), "{internal} must be internal");
        }
        // 6to4 of a public address, and an ordinary global address: not internal.
        for public in ["2002:5db8:d822::1", "2606:4700::1111"] {
            assert!(!is_private_ip(ip(public)), "{public} is public");
        }
    }

    #[test]
    fn an_allow_admits_get_and_head_unless_it_names_its_methods() {
        let s = scope(&["example.com"]);
        assert!(s.check("https://example.com/", "GET").is_ok());
        assert!(s.check("https://example.com/", "head").is_ok());
        assert_eq!(
            s.check("https://example.com/", "POST"),
            Err(UrlRefusal::Method)
        );
        let spec = UrlScopeSpec {
            hosts: vec!["example.com".into()],
            methods: Some(vec!["post".into()]),
            ..UrlScopeSpec::default()
        };
        let s = UrlScope::compile(spec).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(s.spec().methods, Some(vec!["POST".to_owned()]));
        assert!(s.check("https://example.com/", "POST").is_ok());
        assert_eq!(
            s.check("https://example.com/", "GET"),
            Err(UrlRefusal::Method)
        );
        // A deny names the methods it covers; without them it covers every method.
        assert!(s.covers("https://example.com/", "post"));
        assert!(!s.covers("https://example.com/", "GET"));
        assert!(scope(&["example.com"]).covers("https://example.com/", "DELETE"));
        let bad = UrlScopeSpec {
            hosts: vec!["example.com".into()],
            methods: Some(vec!["CONNECT".into()]),
            ..UrlScopeSpec::default()
        };
        assert!(UrlScope::compile(bad).is_err());
    }
}
