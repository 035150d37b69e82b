//! The lab's pages: runs (status, attestation, step counts, score) and comparisons (verdict,
//! interval, the rule that forced `inconclusive`, per-scenario deltas sorted by regression,
//! and two charts drawn as inline SVG: the paired deltas against the interval, and each side's
//! scores). Read through `LabService` (the same checks, roles and audit event as
//! `/v1/sandbox/*`); nothing here changes the lab.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use corral_guard::Caller;
use corral_lab::service::{LabError, LabService, PageQuery};
use corral_lab::verdict::{Comparison as Stats, PairDiff};
use corral_policy::codes;
use corral_store::lab::{Comparison, Paged, Run};

use super::html::{esc, exact, page, pager, utc};
use super::{Signed, html_response, refuse};
use crate::AppState;

/// Rows per page of a listing.
const PAGE: u32 = 50;

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"))
}

/// One of the lab's listings as a page: where it is, its title, its table's caption and
/// header cells, what an empty page says, its query's filter (kept in the Older link), how it
/// reads a page through `LabService` (so its roles and audit apply) and draws a row.
pub(crate) trait LabListing {
    /// A row.
    type Item;
    const PATH: &'static str;
    const TITLE: &'static str;
    const HEAD: &'static str;
    const EMPTY: &'static str;
    const FILTER: Option<&'static str>;
    /// A page of rows (`filter`: the value of [`LabListing::FILTER`], if given).
    fn list(
        lab: &LabService,
        caller: &Caller,
        rid: &str,
        filter: Option<&str>,
        page: &PageQuery,
    ) -> impl Future<Output = Result<Paged<Self::Item>, LabError>> + Send;
    fn row(body: &mut String, item: &Self::Item);
}

/// `GET /ui/runs?scenario=&after=` and `GET /ui/comparisons?after=`: a page of a lab listing,
/// newest first: the query (`after`, the API's cursor, and the listing's filter; anything else
/// refused as the API refuses it), the rows, and the Older link.
pub(crate) async fn listing<L: LabListing>(
    State(state): State<AppState>,
    s: Signed,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let rid = &s.request_id;
    let allowed: &[&str] = match L::FILTER {
        Some(f) => &["after", f],
        None => &["after"],
    };
    let q = match super::query(query, allowed, rid) {
        Ok(q) => q,
        Err(r) => return *r,
    };
    let filter = L::FILTER
        .and_then(|f| q.get(f))
        .map(String::as_str)
        .filter(|v| !v.is_empty());
    let page_q = PageQuery {
        limit: PAGE,
        after: q.get("after").cloned(),
    };
    let listed = match L::list(state.runtime().lab(), &s.caller, rid, filter, &page_q).await {
        Ok(p) => p,
        Err(e) => return refuse(e.code, &e.message, rid),
    };
    let mut body = format!(
        "<div class=\"scroll\"><table><caption class=\"sr-only\">{}, newest first</caption>\
         <thead><tr>{}</tr></thead><tbody>",
        L::TITLE,
        L::HEAD
    );
    for item in &listed.items {
        L::row(&mut body, item);
    }
    body.push_str("</tbody></table></div>");
    if listed.items.is_empty() {
        let _ = write!(body, "<p class=\"empty\">{}</p>", L::EMPTY);
    }
    let keep: Vec<(&str, &str)> = L::FILTER
        .iter()
        .filter_map(|f| filter.map(|v| (*f, v)))
        .collect();
    let next = listed.next.map(|n| n.to_string());
    body.push_str(&pager(L::PATH, &keep, next.as_deref(), None));
    html_response(
        StatusCode::OK,
        page(L::TITLE, Some(&s.frame(&state)), L::PATH, &body),
    )
}

/// The lab's runs (`/v1/sandbox/runs`).
pub(crate) struct Runs;

impl LabListing for Runs {
    type Item = Run;
    const PATH: &'static str = "/ui/runs";
    const TITLE: &'static str = "Lab runs";
    const HEAD: &'static str = "<th scope=\"col\">Run</th><th scope=\"col\">Scenario</th>\
        <th scope=\"col\">Variant</th><th scope=\"col\">Status</th><th scope=\"col\">Isolated</th>\
        <th scope=\"col\">Steps ok / error / total</th><th scope=\"col\">Score</th>\
        <th scope=\"col\">Verdict</th><th scope=\"col\">Started</th>";
    const EMPTY: &'static str = "No run yet.";
    const FILTER: Option<&'static str> = Some("scenario");

    fn list(
        lab: &LabService,
        caller: &Caller,
        rid: &str,
        scenario: Option<&str>,
        page: &PageQuery,
    ) -> impl Future<Output = Result<Paged<Run>, LabError>> + Send {
        lab.list_runs(caller, rid, scenario, page)
    }

    fn row(body: &mut String, r: &Run) {
        run_row(body, r);
    }
}

/// The lab's comparisons (`/v1/sandbox/comparisons`).
pub(crate) struct Comparisons;

impl LabListing for Comparisons {
    type Item = Comparison;
    const PATH: &'static str = "/ui/comparisons";
    const TITLE: &'static str = "Comparisons";
    const HEAD: &'static str = "<th scope=\"col\">Comparison</th><th scope=\"col\">Baseline → candidate</th>\
        <th scope=\"col\">Verdict</th><th scope=\"col\">Delta [95% interval]</th>\
        <th scope=\"col\">Forced by</th><th scope=\"col\">Deploy</th><th scope=\"col\">Recorded</th>";
    const EMPTY: &'static str = "No comparison yet.";
    const FILTER: Option<&'static str> = None;

    fn list(
        lab: &LabService,
        caller: &Caller,
        rid: &str,
        _: Option<&str>,
        page: &PageQuery,
    ) -> impl Future<Output = Result<Paged<Comparison>, LabError>> + Send {
        lab.list_comparisons(caller, rid, page)
    }

    fn row(body: &mut String, c: &Comparison) {
        comparison_row(body, c);
    }
}

fn run_row(body: &mut String, r: &Run) {
    let _ = write!(
        body,
        "<tr><td><a href=\"/ui/runs/{id}\"><code>{id}</code></a></td><td><code>{}</code></td>\
         <td><code>{}</code></td><td>{}</td><td>{}</td><td>{} / {} / {}</td><td>{}</td>\
         <td>{}</td><td>{}</td></tr>",
        exact(&r.scenario_id),
        exact(&r.variant),
        esc(r.status.as_str()),
        yes(r.isolated),
        r.steps_ok,
        r.steps_error,
        r.steps_total,
        num(r.score),
        esc(r.verdict.as_str()),
        esc(&utc(r.started_ms)),
        id = esc(&r.id),
    );
}

fn run_html(r: &Run) -> String {
    let mut body = format!(
        "<dl class=\"facts\"><dt>Scenario</dt><dd><code>{}</code> (version {})</dd>\
         <dt>Variant</dt><dd><code>{}</code></dd><dt>Status</dt><dd>{}</dd>\
         <dt>Backend</dt><dd>{} (runner {})</dd><dt>Isolated</dt><dd>{}</dd>\
         <dt>Destroyed</dt><dd>{}</dd><dt>Steps</dt><dd>{} ok, {} agent errors, {} in all; {} \
         infrastructure errors</dd><dt>Score</dt><dd>{} ({}; scorer {})</dd>\
         <dt>Seed / trials</dt><dd>{} / {}</dd><dt>Started by</dt><dd><code>{}</code></dd>\
         <dt>Started</dt><dd>{}</dd><dt>Finished</dt><dd>{}</dd></dl>",
        exact(&r.scenario_id),
        r.scenario_version,
        exact(&r.variant),
        esc(r.status.as_str()),
        exact(&r.backend),
        exact(&r.runner),
        yes(r.isolated),
        yes(r.destroyed),
        r.steps_ok,
        r.steps_error,
        r.steps_total,
        r.infra_errors,
        num(r.score),
        esc(r.verdict.as_str()),
        exact(r.scorer_suite.as_deref().unwrap_or("none")),
        r.seed,
        r.trials.unwrap_or(1),
        exact(&r.principal),
        esc(&utc(r.started_ms)),
        r.finished_ms
            .map_or_else(|| "–".to_owned(), |f| esc(&utc(f))),
    );
    if let Some(e) = &r.error {
        let _ = write!(
            body,
            "<div class=\"error\"><p><code>{}</code></p><p>{}</p></div>",
            exact(&e.code),
            exact(&e.message)
        );
    }
    body.push_str("<h2>Attestations</h2>");
    if r.attestations.is_empty() {
        body.push_str("<p class=\"muted\">None: every step ran in process, against the mocks.</p>");
    }
    for a in &r.attestations {
        let _ = write!(
            body,
            "<p><code>{}</code>: isolated {}, destroyed {}; applied <code>{}</code></p>",
            exact(&a.backend),
            yes(a.isolated),
            yes(a.destroyed),
            exact(&a.primitives.join(" "))
        );
    }
    if !r.mock_misses.is_empty() {
        let _ = write!(
            body,
            "<h2>Mock misses</h2><p>{} step(s) asked for something the scenario does not mock.</p>",
            r.mock_misses.len()
        );
    }
    body
}

/// `GET /ui/runs/{id}`.
pub(crate) async fn run(
    State(state): State<AppState>,
    s: Signed,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let rid = s.request_id.clone();
    let Ok(Path(id)) = id else {
        return refuse(codes::LAB_NOT_FOUND, "the run id is not UTF-8 text", &rid);
    };
    match state.runtime().lab().get_run(&s.caller, &rid, &id).await {
        Ok(r) => html_response(
            StatusCode::OK,
            page(
                &format!("Run {}", r.id),
                Some(&s.frame(&state)),
                "/ui/runs",
                &run_html(&r),
            ),
        ),
        Err(e) => refuse(e.code, &e.message, &rid),
    }
}

fn comparison_row(body: &mut String, c: &Comparison) {
    let r = &c.record;
    let _ = write!(
        body,
        "<tr><td><a href=\"/ui/comparisons/{id}\"><code>{id}</code></a></td>\
         <td><code>{}</code> → <code>{}</code></td><td><span class=\"verdict verdict-{v}\">{v}</span></td>\
         <td>{:+.3} [{:+.3}, {:+.3}]</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        exact(&r.baseline.variant),
        exact(&r.candidate.variant),
        r.delta,
        r.lower,
        r.upper,
        exact(r.forced_by.as_deref().unwrap_or("–")),
        yes(r.deploy),
        esc(&utc(c.created_ms)),
        id = esc(&c.id),
        v = esc(r.verdict.as_str()),
    );
}

/// The pairs, the largest regression first.
fn by_regression(stats: &Stats) -> Vec<&PairDiff> {
    let mut pairs: Vec<&PairDiff> = stats.pairs.iter().collect();
    pairs.sort_by(|a, b| a.difference.total_cmp(&b.difference));
    pairs
}

/// A horizontal bar per scenario (its paired delta), the zero line, and the interval as a
/// band: SVG attributes only (no style), so the CSP holds.
fn deltas_chart(pairs: &[&PairDiff], lower: f64, upper: f64) -> String {
    let finite = |x: f64| if x.is_finite() { x } else { 0.0 };
    let (lower, upper) = (finite(lower), finite(upper));
    let row = 18.0;
    let (width, left) = (600.0, 300.0);
    let extent = pairs
        .iter()
        .map(|p| p.difference.abs())
        .chain([lower.abs(), upper.abs(), 0.05])
        .filter(|x| x.is_finite())
        .fold(0.0_f64, f64::max);
    let scale = (width - left - 10.0) / 2.0 / extent;
    let mid = left + (width - left) / 2.0 - 5.0;
    let height = row * pairs.len() as f64 + 24.0;
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"Paired score differences per scenario, candidate minus baseline\">\
         <rect x=\"{:.1}\" y=\"0\" width=\"{:.1}\" height=\"{height}\" fill=\"#dbeafe\"/>\
         <line x1=\"{mid:.1}\" y1=\"0\" x2=\"{mid:.1}\" y2=\"{height}\" stroke=\"#334155\"/>",
        mid + lower * scale,
        ((upper - lower) * scale).max(1.0),
    );
    for (i, p) in pairs.iter().enumerate() {
        let y = row * i as f64 + 4.0;
        let d = if p.difference.is_finite() {
            p.difference
        } else {
            0.0
        };
        let (x, w) = if d < 0.0 {
            (mid + d * scale, -d * scale)
        } else {
            (mid, d * scale)
        };
        let fill = if d < 0.0 { "#b91c1c" } else { "#15803d" };
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>\
             <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>",
            left - 8.0,
            y + 11.0,
            esc(&p.scenario.chars().take(40).collect::<String>()),
            w.max(1.0),
            row - 6.0,
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Each side's scores on one axis from 0 to 1: a dot per scenario.
fn scores_chart(pairs: &[&PairDiff]) -> String {
    let (width, left) = (600.0, 90.0);
    let span = width - left - 10.0;
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {width} 70\" role=\"img\" \
         aria-label=\"Score distributions of the baseline and the candidate, 0 to 1\">\
         <text x=\"4\" y=\"22\" font-size=\"11\">baseline</text>\
         <text x=\"4\" y=\"52\" font-size=\"11\">candidate</text>\
         <line x1=\"{left}\" y1=\"64\" x2=\"{}\" y2=\"64\" stroke=\"#334155\"/>",
        left + span
    );
    for p in pairs {
        for (score, y, fill) in [
            (p.baseline, 18.0, "#475569"),
            (p.candidate, 48.0, "#1d4ed8"),
        ] {
            let s = if score.is_finite() {
                score.clamp(0.0, 1.0)
            } else {
                0.0
            };
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{y}\" r=\"4\" fill=\"{fill}\" fill-opacity=\"0.6\"/>",
                left + s * span
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn comparison_html(c: &Comparison) -> String {
    let r = &c.record;
    let stats: Option<Stats> = serde_json::from_value(r.details.clone()).ok();
    let mut body = format!(
        "<p class=\"big\">Verdict: <span class=\"verdict verdict-{v}\">{v}</span></p>\
         <dl class=\"facts\"><dt>Baseline</dt><dd><code>{}</code> ({} runs)</dd>\
         <dt>Candidate</dt><dd><code>{}</code> ({} runs)</dd>\
         <dt>Delta</dt><dd>{:+.4}, 95% interval [{:+.4}, {:+.4}]; unchanged within ±{}</dd>\
         <dt>Forced inconclusive by</dt><dd>{}</dd><dt>Scenarios</dt><dd>{}</dd>\
         <dt>McNemar p</dt><dd>{}</dd><dt>Bootstrap</dt><dd>{} resamples, seed {}</dd>\
         <dt>Recorded by</dt><dd><code>{}</code>{}</dd><dt>Recorded</dt><dd>{}</dd></dl>",
        exact(&r.baseline.variant),
        r.baseline.run_ids.len(),
        exact(&r.candidate.variant),
        r.candidate.run_ids.len(),
        r.delta,
        r.lower,
        r.upper,
        r.margin,
        exact(r.forced_by.as_deref().unwrap_or("no rule")),
        r.scenarios.len(),
        num(r.mcnemar_p),
        r.resamples,
        r.seed,
        exact(&r.recorded_by),
        if r.deploy { ", for a deploy" } else { "" },
        esc(&utc(c.created_ms)),
        v = esc(r.verdict.as_str()),
    );
    let Some(stats) = stats else {
        return body;
    };
    let pairs = by_regression(&stats);
    body.push_str("<h2>Per-scenario deltas, largest regression first</h2>");
    if pairs.is_empty() {
        body.push_str("<p class=\"empty\">No scenario was scored on both sides.</p>");
        return body;
    }
    body.push_str(&deltas_chart(&pairs, r.lower, r.upper));
    body.push_str(
        "<div class=\"scroll\"><table><caption class=\"sr-only\">Per-scenario deltas</caption>\
         <thead><tr><th scope=\"col\">Scenario</th><th scope=\"col\">Baseline</th>\
         <th scope=\"col\">Candidate</th><th scope=\"col\">Delta</th></tr></thead><tbody>",
    );
    for p in &pairs {
        let _ = write!(
            body,
            "<tr><td><code>{}</code></td><td>{:.3}</td><td>{:.3}</td><td>{:+.3}</td></tr>",
            exact(&p.scenario),
            p.baseline,
            p.candidate,
            p.difference
        );
    }
    body.push_str("</tbody></table></div><h2>Score distributions</h2>");
    body.push_str(&scores_chart(&pairs));
    body
}

/// `GET /ui/comparisons/{id}`.
pub(crate) async fn comparison(
    State(state): State<AppState>,
    s: Signed,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let rid = s.request_id.clone();
    let Ok(Path(id)) = id else {
        return refuse(
            codes::LAB_NOT_FOUND,
            "the comparison id is not UTF-8 text",
            &rid,
        );
    };
    match state
        .runtime()
        .lab()
        .get_comparison(&s.caller, &rid, &id)
        .await
    {
        Ok(c) => html_response(
            StatusCode::OK,
            page(
                &format!("Comparison {}", c.id),
                Some(&s.frame(&state)),
                "/ui/comparisons",
                &comparison_html(&c),
            ),
        ),
        Err(e) => refuse(e.code, &e.message, &rid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(scenario: &str, baseline: f64, candidate: f64) -> PairDiff {
        PairDiff {
            scenario: scenario.to_owned(),
            baseline,
            candidate,
            difference: candidate - baseline,
        }
    }

    #[test]
    fn the_charts_are_plain_svg_with_escaped_names_for_any_numbers() {
        let pairs = [
            pair("<script>", 0.9, 0.1),
            pair("b", f64::NAN, f64::INFINITY),
            pair("c", 0.0, 0.0),
        ];
        let refs: Vec<&PairDiff> = pairs.iter().collect();
        for svg in [
            deltas_chart(&refs, f64::NEG_INFINITY, f64::NAN),
            deltas_chart(&[], 0.0, 0.0),
            scores_chart(&refs),
        ] {
            assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
            assert!(
                !svg.contains("<script>") && !svg.contains("style="),
                "{svg}"
            );
        }
    }
}
