//! The matcher: every written form of a value matches, near misses do not.

use corral_learn::manifest::Value;
use corral_learn::matcher::Matcher;
use proptest::prelude::*;

fn check(value: Value, matching: &[&str], not_matching: &[&str]) {
    let m = Matcher::new(&[value]).unwrap();
    for text in matching {
        assert!(m.is_match(text), "should match: {text:?}");
    }
    for text in not_matching {
        assert!(!m.is_match(text), "should not match: {text:?}");
    }
}

#[test]
fn digits_match_plain_and_with_every_separator() {
    check(
        Value::Integer(5100),
        &[
            "5100",
            "The total lag is 5100.",
            "lag: 5,100 messages",
            "5.100",
            "5 100",
            "5_100",
            "5'100",
            "5\u{a0}100",
            "5\u{202f}100",
            "-5100",
            "(5100)",
            "{\"lag\": 5100}",
            "{\"lag\":\"5,100\"}",
            "3000-5100",
            "5100.",
            "5100.0",
            "5100.00",
            "5.100,00",
            "$5100",
        ],
        &[],
    );
}

#[test]
fn digit_near_misses_do_not_match() {
    check(
        Value::Integer(5100),
        &[],
        &[
            "51000",
            "510",
            "51001",
            "15100",
            "abc5100",
            "x5100",
            "v5100",
            "0.5100",
            "1,5100",
            "15,100",
            "5,1000",
            "5.100.2",
            "version 5.100.2",
            "5100k",
            "5100M",
            "5100_000",
            "5.100.000",
            "5,100,000",
            "5100.000",
            "5100,000",
            "5100.5",
            "5100e3",
            "5100abc123",
            "5_1_0_0",
            "51 00",
            "5,10,0",
        ],
    );
}

#[test]
fn a_unit_written_against_the_digits_still_matches() {
    check(Value::Integer(5100), &["5100msgs", "5100ms", "5100x"], &[]);
}

#[test]
fn abbreviations_match_within_the_values_rounding() {
    check(
        Value::Integer(5100),
        &[
            "5.1k",
            "5.1K",
            "about 5.1 k messages",
            "5,1k",
            "5.10k",
            "5.100k",
            "5.1 thousand",
        ],
        &[
            "5k",
            "5.2k",
            "5.0k",
            "5.1kg",
            "5.1 kilo",
            "5.1m",
            "5.1 thousands",
            "51k",
        ],
    );
    check(Value::Integer(5000), &["5k", "5.0k", "5 thousand"], &["6k"]);
    check(
        Value::Integer(5149),
        &["5.1k", "5.15k", "5.149k", "5.14k"],
        &["5.2k", "5k", "5.16k"],
    );
    check(
        Value::Integer(2_340_000),
        &["2.34M", "2.34 million", "2.3m", "2.34mn", "2340k"],
        &["2M", "2.4M", "0.2B"],
    );
    check(
        Value::Integer(1_200_000_000),
        &["1.2B", "1.2 billion", "1.2bn"],
        &["1B"],
    );
}

#[test]
fn numbers_in_words_match() {
    check(
        Value::Integer(5100),
        &[
            "five thousand one hundred",
            "Five Thousand One Hundred",
            "FIVE THOUSAND, ONE HUNDRED messages",
            "five thousand and one hundred",
            "fifty-one hundred",
            "fifty one hundred",
            "five-thousand-one-hundred",
            "it is five thousand one hundred.",
        ],
        &[
            "five thousand",
            "five thousand one hundred and ten",
            "one hundred",
            "fifty",
            "fivethousand onehundred",
        ],
    );
    check(
        Value::Integer(123_456),
        &[
            "one hundred twenty-three thousand four hundred fifty-six",
            "one hundred and twenty three thousand, four hundred and fifty six",
        ],
        &["one hundred twenty-three thousand four hundred fifty"],
    );
    check(
        Value::Integer(-2500),
        &["minus two thousand five hundred", "twenty-five hundred"],
        &[],
    );
    check(
        Value::Integer(100),
        &["one hundred"],
        &["someone hundred", "one hundred one"],
    );
}

#[test]
fn decimals_match_with_either_decimal_mark_and_trailing_zeros() {
    check(
        Value::Decimal(5100.25),
        &[
            "5100.25", "5,100.25", "5.100,25", "5 100,25", "5100,25", "5100.250", "5.1k",
        ],
        &[
            "5100.2",
            "5100.255",
            "5100",
            "5100.26",
            "5100.25.1",
            "15100.25",
        ],
    );
    check(
        Value::Decimal(123.5),
        &["123.5", "123,5", "123.50"],
        &["1123.5", "123.55"],
    );
}

#[test]
fn strings_match_as_case_insensitive_substrings() {
    check(
        Value::Text("orders-7".into()),
        &[
            "orders-7",
            "ORDERS-7",
            "Partition Orders-7 is stuck",
            "xorders-7x",
        ],
        &["orders-6", "orders 7", "order-7"],
    );
    check(
        Value::Text("Größe".into()),
        &["die größe", "DIE GRÖSSE", "Größe"],
        &["grosse"],
    );
}

#[test]
fn unicode_tricks_are_normalized_away() {
    check(
        Value::Integer(5100),
        &[
            "5\u{200b}100",
            "51\u{200d}00",
            "\u{ff15}\u{ff11}\u{ff10}\u{ff10}",
            "5\u{2009}100",
            "5\u{2019}100",
        ],
        &[],
    );
    check(
        Value::Text("orders-7".into()),
        &["orders\u{2010}7", "ord\u{ad}ers-7"],
        &[],
    );
}

#[test]
fn find_reports_every_matching_target_once_in_order() {
    let m = Matcher::new(&[
        Value::Integer(5100),
        Value::Text("orders-7".into()),
        Value::Integer(7300),
    ])
    .unwrap();
    assert_eq!(
        m.find("7300 then 5,100, orders-7 and 5100 again"),
        vec![0, 1, 2]
    );
    assert_eq!(m.find("seven thousand three hundred"), vec![2]);
    assert!(m.find("nothing here: 42, 510, 73000").is_empty());
}

#[test]
fn two_targets_with_the_same_number_both_match_in_words() {
    let m = Matcher::new(&[Value::Integer(5100), Value::Integer(5100)]).unwrap();
    assert_eq!(m.find("five thousand one hundred"), vec![0, 1]);
}

#[test]
fn the_same_text_always_gives_the_same_answer() {
    let m = Matcher::new(&[Value::Integer(5100), Value::Text("orders-7".into())]).unwrap();
    let text = "lag 5,100 on orders-7, five thousand one hundred";
    let first = m.find(text);
    for _ in 0..20 {
        assert_eq!(m.find(text), first);
    }
}

/// One written form of `n` (the strategy's index picks which).
fn format_integer(n: u64, style: usize) -> String {
    let digits = n.to_string();
    let grouped = |sep: &str| {
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
    };
    match style % 7 {
        0 => digits,
        1 => grouped(","),
        2 => grouped("."),
        3 => grouped(" "),
        4 => grouped("_"),
        5 => grouped("'"),
        _ => format!("{digits}.00"),
    }
}

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
    fn below_1000(n: u64) -> String {
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
                parts.push(format!("{t}-{}", ONES[(r % 10) as usize]));
            }
        } else if r > 0 {
            parts.push(ONES[r as usize].to_owned());
        }
        parts.join(" ")
    }
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

proptest! {
    // Each case builds an automaton (unoptimized in tests): fewer cases than the default 256.
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_formatted_value_always_matches(n in 100u64..100_000_000_000, style in 0usize..7, prefix in "[ :(\\[]{0,8}", suffix in "[ .,;)\\]]{0,8}") {
        let m = Matcher::new(&[Value::Integer(i64::try_from(n).unwrap())]).unwrap();
        let text = format!("{prefix}{}{suffix}", format_integer(n, style));
        prop_assert!(m.is_match(&text), "{}", text);
    }

    #[test]
    fn a_value_in_words_always_matches(n in 100u64..10_000_000_000) {
        let m = Matcher::new(&[Value::Integer(i64::try_from(n).unwrap())]).unwrap();
        let text = format!("it is {} in total", words(n));
        prop_assert!(m.is_match(&text), "{}", text);
    }

    #[test]
    fn an_integer_with_a_digit_added_never_matches(n in 100u64..100_000_000, d in 0u8..10, front in proptest::bool::ANY) {
        let m = Matcher::new(&[Value::Integer(i64::try_from(n).unwrap())]).unwrap();
        let text = if front { format!("{d}{n}") } else { format!("{n}{d}") };
        prop_assert!(!m.is_match(&text), "{}", text);
    }
}
