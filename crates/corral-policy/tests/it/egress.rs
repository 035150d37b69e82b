//! Egress allow-lists (issue 12 item 4): entry syntax, matching, and which resolved addresses
//! an entry admits.

use corral_policy::scope::{EgressAllowList, EgressRefusal};

fn list(entries: &[&str]) -> EgressAllowList {
    EgressAllowList::parse(entries).unwrap()
}

#[test]
fn subdomain_patterns_match_subdomains_only_and_ports_exactly() {
    let l = list(&["*.pypi.org:443", "api.github.com:443"]);
    assert!(l.admit("files.pypi.org", 443).is_ok());
    assert!(l.admit("FILES.PyPI.org.", 443).is_ok());
    assert!(l.admit("pypi.org", 443).is_err());
    assert!(l.admit("evilpypi.org", 443).is_err());
    assert!(l.admit("api.github.com", 80).is_err());
    assert!(l.admit("github.com", 443).is_err());
}

#[test]
fn internal_addresses_need_an_entry_naming_that_address() {
    let l = list(&["localhost:8080", "127.0.0.1:9090"]);
    let by_name = l.admit("localhost", 8080).unwrap();
    assert_eq!(
        EgressAllowList::address_ok(by_name, "127.0.0.1".parse().unwrap()),
        Err(EgressRefusal::Internal("127.0.0.1".parse().unwrap()))
    );
    let by_ip = l.admit("127.0.0.1", 9090).unwrap();
    assert!(EgressAllowList::address_ok(by_ip, "127.0.0.1".parse().unwrap()).is_ok());
    for metadata in [
        "169.254.169.254",
        "fd00:ec2::254",
        "100.64.0.1",
        "::ffff:10.0.0.1",
    ] {
        assert!(
            EgressAllowList::address_ok(by_name, metadata.parse().unwrap()).is_err(),
            "{metadata}"
        );
    }
    assert!(EgressAllowList::address_ok(by_name, "93.184.216.34".parse().unwrap()).is_ok());
}

#[test]
fn bad_entries_say_how_to_write_them() {
    for (bad, hint) in [
        ("api.github.com", "port is missing"),
        ("https://api.github.com:443", "without a scheme"),
        ("*.com:443", "two labels"),
        ("api.*.com:443", "first label"),
        ("a.com:0", "1 to 65535"),
        ("a.com:1-100", "1 to 65535"),
        ("::1:443", "brackets"),
        ("[nothost]:443", "IPv6"),
        ("a b.com:443", "character"),
    ] {
        let e = EgressAllowList::parse(&[bad]).unwrap_err();
        assert!(e[0].to_string().contains(hint), "{bad}: {}", e[0]);
    }
    assert!(EgressAllowList::parse(&["[::1]:443", "10.0.0.1:80"]).is_ok());
}
