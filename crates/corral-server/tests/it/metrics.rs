//! `GET /metrics`: calls by op and outcome and a latency histogram, in OpenMetrics text that a
//! scraper parses; an op a caller made up is counted as `unknown`.

use std::collections::BTreeMap;

use serde_json::json;

use crate::common::{AGENT_TOKEN, Server, Workspace, send};

/// One sample line: series name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the exposition as a scraper does: `# ` lines are metadata, every other line is
/// `name{k="v",...} value`.
fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').expect("a sample is `series value`");
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with `}`");
                let labels = body
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("a label is k=\"v\"");
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                        (k.to_owned(), v.expect("a quoted label value").to_owned())
                    })
                    .collect();
                (name, labels)
            }
        };
        let value = value.parse().expect("a sample value is a number");
        out.push((name.to_owned(), labels, value));
    }
    out
}

/// The value of the one sample named `name` whose labels include `labels`.
fn value(all: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut hits = all.iter().filter(|(n, l, _)| {
        n == name
            && labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    });
    let hit = hits.next().map(|(_, _, v)| *v);
    assert!(
        hits.next().is_none(),
        "more than one `{name}` with {labels:?}"
    );
    hit
}

#[tokio::test]
async fn metrics_count_each_call_by_op_and_outcome_and_time_it() {
    let ws = Workspace::new();
    ws.write("notes.txt", "hello");
    let s = Server::start(&ws.load(&ws.jail_yaml(""), &crate::common::token_env()))
        .await
        .with_token(AGENT_TOKEN);
    let read = json!({"path": ws.at("notes.txt")});
    assert_eq!(
        s.call("files.read", read.clone()).await.ok()["content"],
        "hello"
    );
    assert_eq!(s.call("files.read", read).await.ok()["content"], "hello");
    // An op nobody mounted, with a name made to look like a label: counted as `unknown`.
    let made_up = "nope\"} 1\ncorral_calls_total{op=\"x";
    let r = s.call(&made_up.replace('\n', "%0A"), json!({})).await;
    assert_eq!(r.status, 404, "{}", r.text);

    let m = s.get("/metrics").await;
    assert_eq!(m.status, 200, "{}", m.text);
    assert_eq!(
        m.headers.get("content-type").and_then(|h| h.to_str().ok()),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    for meta in [
        "# HELP corral_calls Calls decided, by op and outcome.\n",
        "# TYPE corral_calls counter\n",
        "# HELP corral_call_duration_seconds Time from receipt to response.\n",
        "# TYPE corral_call_duration_seconds histogram\n",
    ] {
        assert!(m.text.contains(meta), "no {meta:?} in:\n{}", m.text);
    }
    assert!(m.text.ends_with("# EOF\n"), "{}", m.text);

    let all = samples(&m.text);
    let calls = "corral_calls_total";
    assert_eq!(
        value(&all, calls, &[("op", "files.read"), ("outcome", "ok")]),
        Some(2.0),
        "{}",
        m.text
    );
    assert_eq!(
        value(
            &all,
            calls,
            &[("op", "unknown"), ("outcome", "not_enabled")]
        ),
        Some(1.0),
        "{}",
        m.text
    );
    let ops: Vec<&str> = all
        .iter()
        .filter(|(n, _, _)| n == calls)
        .map(|(_, l, _)| l["op"].as_str())
        .collect();
    assert!(
        ops.iter().all(|op| ["files.read", "unknown"].contains(op)),
        "{ops:?}"
    );
    let total: f64 = all.iter().filter(|(n, _, _)| n == calls).map(|s| s.2).sum();

    let h = "corral_call_duration_seconds";
    let count = value(&all, &format!("{h}_count"), &[]).expect("a histogram count");
    assert_eq!(count, total, "every counted call is timed:\n{}", m.text);
    assert_eq!(
        value(&all, &format!("{h}_bucket"), &[("le", "+Inf")]),
        Some(count)
    );
    assert!(value(&all, &format!("{h}_sum"), &[]).is_some_and(|s| s >= 0.0));
    let buckets: Vec<(f64, f64)> = all
        .iter()
        .filter(|(n, _, _)| *n == format!("{h}_bucket"))
        .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap(), *v))
        .collect();
    assert_eq!(buckets.len(), 15, "14 bounds and +Inf:\n{}", m.text);
    assert_eq!(buckets[0].0, 0.0005);
    assert_eq!(buckets[13].0, 10.0);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "buckets are cumulative:\n{}",
        m.text
    );
}

#[tokio::test]
async fn metrics_need_a_token() {
    let ws = Workspace::new();
    let s = Server::start(&ws.load(&ws.jail_yaml(""), &crate::common::token_env())).await;
    send(s.client().get(s.url("/metrics")))
        .await
        .assert_error(401, "auth.missing");
}
