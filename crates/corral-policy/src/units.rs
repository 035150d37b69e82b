//! Strict parsers for sizes (`10MB`, `10MiB`), durations (`90s`, `5m`) and rates (`10/min`).

use std::fmt;
use std::time::Duration;

use crate::error::PolicyError;

fn split_number(s: &str) -> Option<(u64, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let (n, unit) = s.split_at(digits);
    n.parse().ok().map(|n| (n, unit))
}

/// Parses a size: an integer and one of `B KB MB GB TB KiB MiB GiB TiB` (no space, case as
/// written). Overflow is an error.
pub fn parse_size(s: &str) -> Result<u64, PolicyError> {
    let bad = || PolicyError::InvalidUnit {
        kind: "size",
        value: s.to_owned(),
    };
    let (n, unit) = split_number(s).ok_or_else(bad)?;
    let mul: u64 = match unit {
        "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    n.checked_mul(mul).ok_or_else(bad)
}

/// Parses a duration: an integer and one of `ms s m h`. Zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration, PolicyError> {
    let bad = || PolicyError::InvalidUnit {
        kind: "duration",
        value: s.to_owned(),
    };
    let (n, unit) = split_number(s).ok_or_else(bad)?;
    if n == 0 {
        return Err(bad());
    }
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
        "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    Ok(d)
}

/// Prints a duration the way `parse_duration` reads it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Prints a size the way `parse_size` reads it.
pub fn format_size(n: u64) -> String {
    for (unit, mul) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("TB", 1_000_000_000_000),
        ("GB", 1_000_000_000),
        ("MB", 1_000_000),
        ("KB", 1_000),
    ] {
        if n >= mul && n.is_multiple_of(mul) {
            return format!("{}{unit}", n / mul);
        }
    }
    format!("{n}B")
}

/// A rate limit: at most `count` calls per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls allowed in one window; at least 1.
    pub count: u32,
    /// The window.
    pub per: Duration,
}

impl Rate {
    /// Parses `N/unit` with unit one of `s sec second min minute h hour day`.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let bad = || PolicyError::InvalidUnit {
            kind: "rate",
            value: s.to_owned(),
        };
        let (n, unit) = s.split_once('/').ok_or_else(bad)?;
        let (count, rest) = split_number(n).ok_or_else(bad)?;
        if !rest.is_empty() || count == 0 {
            return Err(bad());
        }
        let count = u32::try_from(count).map_err(|_| bad())?;
        let per = match unit {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "day" => Duration::from_secs(86_400),
            _ => return Err(bad()),
        };
        Ok(Self { count, per })
    }

    /// Whether `self` allows fewer calls per unit of time than `other`.
    pub fn is_stricter_than(&self, other: &Rate) -> bool {
        // count/per < other.count/other.per, compared without division.
        u128::from(self.count) * other.per.as_millis()
            < u128::from(other.count) * self.per.as_millis()
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.per.as_secs() {
            1 => "s",
            60 => "min",
            3600 => "hour",
            _ => "day",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_strictly() {
        assert_eq!(parse_size("10MB"), Ok(10_000_000));
        assert_eq!(parse_size("10MiB"), Ok(10 << 20));
        assert_eq!(parse_size("0B"), Ok(0));
        for bad in [
            "10",
            "10 MB",
            "10mb",
            "1.5GB",
            "MB",
            "-1MB",
            "99999999999999999999TB",
            "",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} should be refused");
        }
        assert!(parse_size("18446744073709551615TiB").is_err());
    }

    #[test]
    fn durations_parse_strictly() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["0s", "90", "5 m", "1.5h", "5min", "s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
    }

    #[test]
    fn rates_parse_strictly_and_compare() {
        let r = Rate::parse("10/min");
        assert_eq!(
            r,
            Ok(Rate {
                count: 10,
                per: Duration::from_secs(60)
            })
        );
        for bad in [
            "0/min",
            "10",
            "10/fortnight",
            "/min",
            "1.5/s",
            "10 /min",
            "ten/min",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad} should be refused");
        }
        let (Ok(a), Ok(b)) = (Rate::parse("1/s"), Rate::parse("10/min")) else {
            unreachable!("both rates are valid")
        };
        assert!(b.is_stricter_than(&a));
        assert!(!a.is_stricter_than(&b));
    }
}
