//! `learn-bench`: the answer guard's latency on a 4 KiB reply against 50 targets, against a
//! naive anchor that runs one regex per target.
//!
//! The targets: 40 integers (4 to 9 digits), 5 decimals, 5 strings. The reply: 4096 bytes of
//! English prose with numbers that are not targets (ports, percentages, years, offsets), so
//! the whole text is scanned; a second reply, the same size, states one target at its end.
//!
//! - **guard**: `corral_learn::guard::check` on a `Snapshot` (the automaton built once), level
//!   0, one text part, no tool calls: every form (digits with separators, k/M/B, words,
//!   strings) in one scan.
//! - **naive**: per target, one `regex` of its digit and k-forms (the same strings the matcher
//!   derives, escaped, in an alternation) with boundary classes, run one after the other; it
//!   does not even look for numbers in words, so it does less than the guard.
//!
//! Rounds alternate between the two; medians of per-call time are printed, with the ratio.
//! `cargo bench -p learn-bench` (optimized). `bench/RESULTS.md` keeps the figures.

// A benchmark harness: a broken fixture should abort loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use corral_learn::guard::{self, Outcome, TurnState};
use corral_learn::levels::Level;
use corral_learn::manifest::{Manifest, Target, Value};
use corral_learn::watch::Snapshot;
use regex::Regex;

const ROUNDS: usize = 15;
const CALLS: usize = 2_000;

fn targets() -> Vec<Target> {
    let mut out = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..40 {
        let digits = 4 + (i % 6) as u32;
        let lo = 10u64.pow(digits - 1);
        let n = lo + next() % (9 * lo);
        out.push(Value::Integer(i64::try_from(n).unwrap()));
    }
    for _ in 0..5 {
        let n = 1000 + next() % 90_000;
        out.push(Value::Decimal(n as f64 + 0.25));
    }
    for name in [
        "orders-7f",
        "payments-dlq",
        "broker-3-east",
        "inventory-sync",
        "eu-west-lag",
    ] {
        out.push(Value::Text(name.to_owned()));
    }
    out.into_iter()
        .enumerate()
        .map(|(i, value)| Target {
            id: format!("t{i}"),
            descriptor: format!("quantity number {i}"),
            value,
            unit: None,
        })
        .collect()
}

fn reply(len: usize) -> String {
    let para = "The consumer group reads from twelve partitions on port 9092; replication is \
        at 3 and the retention is 7 days. Offsets moved by 42, 17 and 230 in the last poll, \
        about 12% of the 2024 baseline. Check the committed offsets per partition, compare \
        them with the log end offsets, and look at which consumer owns the slowest one. ";
    let mut s = String::new();
    while s.len() < len {
        s.push_str(para);
    }
    s.truncate(len);
    s
}

/// English words for `n` (the canonical spelling), for the naive anchor.
fn words(n: u64) -> String {
    const ONES: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 10] = [
        "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    let below_1000 = |n: u64| {
        let mut parts = Vec::new();
        if n >= 100 {
            parts.push(format!("{} hundred", ONES[(n / 100) as usize]));
        }
        let r = n % 100;
        if r >= 20 {
            let t = TENS[(r / 10) as usize];
            if r.is_multiple_of(10) {
                parts.push(t.to_owned());
            } else {
                parts.push(format!("{t} {}", ONES[(r % 10) as usize]));
            }
        } else if r > 0 {
            parts.push(ONES[r as usize].to_owned());
        }
        parts.join(" ")
    };
    let mut parts = Vec::new();
    for (scale, name) in [
        (1_000_000_000u64, " billion"),
        (1_000_000, " million"),
        (1_000, " thousand"),
        (1, ""),
    ] {
        let chunk = (n / scale) % 1000;
        if chunk > 0 {
            parts.push(format!("{}{name}", below_1000(chunk)));
        }
    }
    parts.join(" ")
}

/// The naive anchor's regex for one target: its digit forms and k-forms (the strings the
/// matcher derives), and with `with_words` its spelling in words, spaces, hyphens, commas and
/// "and" allowed between the words.
fn naive_regex(value: &Value, with_words: bool) -> Regex {
    let forms: Vec<String> = match value {
        Value::Integer(n) => {
            let d = n.unsigned_abs().to_string();
            let mut f = vec![d.clone()];
            for sep in [",", ".", " ", "_", "'"] {
                f.push(group(&d, sep));
            }
            let k = *n as f64 / 1000.0;
            f.push(format!("{k:.1}k"));
            f.push(format!("{k:.2}k"));
            f
        }
        Value::Decimal(x) => {
            let s = format!("{x}");
            let (i, fr) = s.split_once('.').unwrap();
            vec![
                s.clone(),
                format!("{}.{fr}", group(i, ",")),
                format!("{}.{fr}", group(i, " ")),
                format!("{}.{fr}", group(i, "_")),
                format!("{i},{fr}"),
                format!("{},{fr}", group(i, ".")),
            ]
        }
        Value::Text(t) => vec![t.clone()],
    };
    let mut alt: Vec<String> = forms.iter().map(|f| regex::escape(f)).collect();
    if let (true, Value::Integer(n)) = (with_words, value) {
        let w = words(n.unsigned_abs());
        alt.push(
            w.split(' ')
                .collect::<Vec<_>>()
                .join(r"[\s,-]+(?:and[\s,-]+)?"),
        );
    }
    let pattern = match value {
        Value::Text(_) => format!("(?i){}", alt.join("|")),
        _ => format!("(?i)(?:^|[^0-9A-Za-z_])(?:{})(?:[^0-9]|$)", alt.join("|")),
    };
    Regex::new(&pattern).unwrap()
}

fn group(digits: &str, sep: &str) -> String {
    let head = digits.len() % 3;
    let mut out = digits[..head].to_owned();
    let mut i = head;
    while i < digits.len() {
        if !out.is_empty() {
            out.push_str(sep);
        }
        out.push_str(&digits[i..i + 3]);
        i += 3;
    }
    out
}

/// This thread's time on a CPU (`/proc/thread-self/schedstat`, ns): unlike wall time, it does
/// not count the time spent waiting for a core on a shared, loaded machine.
fn cpu_now() -> Duration {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(s.split_whitespace().next().unwrap().parse().unwrap())
}

/// Runs `f` `CALLS` times; (wall, on-CPU) time per call.
fn timed(mut f: impl FnMut()) -> (Duration, Duration) {
    let (wall, cpu) = (Instant::now(), cpu_now());
    for _ in 0..CALLS {
        f();
    }
    (
        wall.elapsed() / CALLS as u32,
        (cpu_now() - cpu) / CALLS as u32,
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let targets = targets();
    let manifest = Manifest {
        scenario_id: "bench".into(),
        seeded_at: time::OffsetDateTime::UNIX_EPOCH,
        default_disclosure: 0,
        targets: targets.clone(),
    };
    let built = Instant::now();
    let snapshot = Snapshot::new(manifest).unwrap();
    let build_time = built.elapsed();
    let regexes: Vec<Regex> = targets
        .iter()
        .map(|t| naive_regex(&t.value, true))
        .collect();
    let digit_regexes: Vec<Regex> = targets
        .iter()
        .map(|t| naive_regex(&t.value, false))
        .collect();

    let clean = reply(4096);
    assert_eq!(clean.len(), 4096);
    // The same size, one target stated in words at the end (the guard must find it).
    let Value::Integer(last_int) = targets[39].value else {
        unreachable!()
    };
    let mut leaking = reply(4096 - 60);
    leaking.push_str(&format!(" {last_int}."));
    let level = Level::ZERO;

    // Sanity: the guard passes the clean reply, withholds the leaking one; the naive agrees.
    let mut t = vec![clean.clone()];
    assert_eq!(
        guard::check(&snapshot, level, &mut TurnState::new(), &mut t, false),
        Outcome::Clean
    );
    let mut t = vec![leaking.clone()];
    assert!(matches!(
        guard::check(&snapshot, level, &mut TurnState::new(), &mut t, false),
        Outcome::Withheld { .. }
    ));
    assert!(!regexes.iter().any(|r| r.is_match(&clean)));
    assert!(regexes.iter().any(|r| r.is_match(&leaking)));

    // (wall, cpu) per call, per round.
    let mut rows: [Vec<(Duration, Duration)>; 5] = Default::default();
    for _ in 0..ROUNDS {
        rows[4].push(timed(|| {
            let hits = digit_regexes
                .iter()
                .filter(|r| r.is_match(black_box(&clean)))
                .count();
            black_box(hits);
        }));
        let mut texts = vec![clean.clone()];
        rows[0].push(timed(|| {
            let mut turn = TurnState::new();
            black_box(guard::check(
                &snapshot,
                level,
                &mut turn,
                black_box(&mut texts),
                false,
            ));
        }));
        rows[1].push(timed(|| {
            let hits = regexes
                .iter()
                .filter(|r| r.is_match(black_box(&clean)))
                .count();
            black_box(hits);
        }));
        rows[2].push(timed(|| {
            let mut texts = vec![leaking.clone()];
            let mut turn = TurnState::new();
            black_box(guard::check(
                &snapshot,
                level,
                &mut turn,
                black_box(&mut texts),
                false,
            ));
        }));
        rows[3].push(timed(|| {
            let hits = regexes
                .iter()
                .filter(|r| r.is_match(black_box(&leaking)))
                .count();
            black_box(hits);
        }));
    }
    let med = |i: usize| {
        let wall = median(rows[i].iter().map(|r| r.0).collect());
        let cpu = median(rows[i].iter().map(|r| r.1).collect());
        (wall, cpu)
    };
    let (gc, nc, gl, nl, dc) = (med(0), med(1), med(2), med(3), med(4));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "learn-bench: 4096-byte reply, 50 targets, {ROUNDS} rounds x {CALLS} calls, medians per call (wall / on-CPU)"
    );
    println!(
        "automaton build (once per manifest): {build_time:?}; {:?}",
        snapshot.matcher()
    );
    for (name, g, n) in [("clean reply", gc, nc), ("leaking reply", gl, nl)] {
        println!(
            "{name}: guard {:?} / {:?}   naive per-target regex {:?} / {:?}   ratio {:.1}x / {:.1}x",
            g.0,
            g.1,
            n.0,
            n.1,
            ratio(n.0, g.0),
            ratio(n.1, g.1)
        );
    }
    // Where the guard's time goes: the matcher over the 45 numbers only, the 5 strings only.
    let parts = |keep: fn(&Value) -> bool| {
        let values: Vec<Value> = targets
            .iter()
            .map(|t| t.value.clone())
            .filter(keep)
            .collect();
        let m = corral_learn::matcher::Matcher::new(&values).unwrap();
        let rounds: Vec<(Duration, Duration)> = (0..ROUNDS)
            .map(|_| {
                timed(|| {
                    black_box(m.is_match(black_box(&clean)));
                })
            })
            .collect();
        (
            median(rounds.iter().map(|r| r.0).collect()),
            median(rounds.iter().map(|r| r.1).collect()),
        )
    };
    let numbers = parts(|v| !matches!(v, Value::Text(_)));
    let strings = parts(|v| matches!(v, Value::Text(_)));
    println!(
        "clean reply, matcher alone: 45 numbers {:?} / {:?}, 5 strings {:?} / {:?}",
        numbers.0, numbers.1, strings.0, strings.1
    );
    println!(
        "clean reply, naive regexes without the words form (less work than the guard): {:?} / {:?}, ratio {:.1}x / {:.1}x",
        dc.0,
        dc.1,
        ratio(dc.0, gc.0),
        ratio(dc.1, gc.1)
    );
    // The same clean reply read after a history (a split value's check): the request's last
    // assistant message, a 4 KiB one, joined with the reply's head.
    let history = reply(4096);
    let seen = [history.as_str()];
    let after: Vec<(Duration, Duration)> = (0..ROUNDS)
        .map(|_| {
            let mut texts = vec![clean.clone()];
            timed(|| {
                let mut turn = TurnState::new();
                black_box(guard::check_after(
                    &snapshot,
                    level,
                    &mut turn,
                    black_box(&seen),
                    black_box(&mut texts),
                    false,
                ));
            })
        })
        .collect();
    println!(
        "clean reply after a 4 KiB history (check_after): guard {:?} / {:?}",
        median(after.iter().map(|r| r.0).collect()),
        median(after.iter().map(|r| r.1).collect())
    );
}
