//! HTML for the console: the one escaping helper every value goes through ([`esc`]), a
//! variant for exact text a person must read as it is ([`exact`]), and the page frame.
//! Every byte of an op argument, an op name or a principal id is the caller's, so nothing is
//! written into a page except through these.

use std::fmt::Write as _;

/// `s` escaped for HTML text and double-quoted attribute values: `&`, `<`, `>`, `"` and `'`
/// become entities; NUL (which a browser would turn into U+FFFD) becomes `\u{0}` too, so what
/// a page shows is what was there.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\0' => out.push_str("\\u{0}"),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how text around them reads without showing themselves: Unicode's
/// whole `Default_Ignorable_Code_Point` set (bidi overrides and isolates, zero-width
/// characters, the soft hyphen, the BOM, the combining grapheme joiner, Hangul fillers,
/// variation selectors, which can smuggle any bytes inside innocent-looking text, tags), the
/// interlinear annotation marks, the line and paragraph separators (a line break the JSON does
/// not have), and C0/C1 controls other than newline and tab.
fn hides(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
        || (c.is_control() && c != '\n' && c != '\t')
}

/// `s` escaped like [`esc`], with every invisible or reordering character shown as a marked
/// `\u{XXXX}` instead: what a person approves (canonical arguments, an op id, a requester) must
/// read exactly as the bytes that run, so a bidi override in an argument cannot make
/// `rm -rf /` look like something else.
pub(crate) fn exact(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        if hides(c) {
            let _ = write!(
                out,
                "<span class=\"hidden-char\" title=\"an invisible character\">\\u{{{:04X}}}</span>",
                u32::from(c)
            );
        } else {
            out.push_str(&esc(c.encode_utf8(&mut [0; 4])));
        }
    }
    out
}

/// The links to a listing's neighbouring pages: `path` with `keep` (the page's filters; empty
/// ones left out) and the API's own `after` cursor of the older page and, where a page reads
/// forwards (a session's events), of the newer one. Nothing when there is neither.
pub(crate) fn pager(
    path: &str,
    keep: &[(&str, &str)],
    older: Option<&str>,
    newer: Option<&str>,
) -> String {
    let link = |after: &str, label: &str, rel: &str| {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in keep.iter().filter(|(_, v)| !v.is_empty()) {
            q.append_pair(k, v);
        }
        q.append_pair("after", after);
        format!(
            "<a href=\"{}?{}\" rel=\"{rel}\">{label}</a>",
            esc(path),
            esc(&q.finish())
        )
    };
    let links: Vec<String> = [
        older.map(|a| link(a, "Older", "next")),
        newer.map(|a| link(a, "Newer", "prev")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if links.is_empty() {
        return String::new();
    }
    format!(
        "<nav class=\"pager\" aria-label=\"Pages\">{}</nav>",
        links.join(" ")
    )
}

/// The console's navigation entries: (path, label, admin only).
const NAV: &[(&str, &str, bool)] = &[
    ("/ui/inbox", "Approvals", false),
    ("/ui/ops", "Ops", false),
    ("/ui/runs", "Runs", false),
    ("/ui/comparisons", "Comparisons", false),
    ("/ui/sessions", "Agents", false),
    ("/ui/audit", "Audit", true),
];

/// Who is signed in, for the page frame.
#[derive(Debug, Clone)]
pub(crate) struct Frame<'a> {
    /// The principal's id.
    pub who: &'a str,
    /// Its kind and roles, one line.
    pub what: String,
    /// Whether it may read the audit.
    pub admin: bool,
    /// The session's CSRF token, for the sign-out form.
    pub csrf: &'a str,
    /// Learning mode's badge: the scenario id and the reader's level (0 to 3).
    pub learning: Option<(String, u8)>,
}

/// A whole page: `title`, the frame when signed in (navigation, who, sign-out), and `body`
/// (already HTML).
pub(crate) fn page(title: &str, frame: Option<&Frame<'_>>, current: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    out.push_str(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"stylesheet\" href=\"/ui/static/console.css\">\
         <script src=\"/ui/static/console.js\" defer></script>",
    );
    let _ = write!(out, "<title>{} · corral</title></head><body>", esc(title));
    out.push_str("<a class=\"skip\" href=\"#main\">Skip to content</a><header><span class=\"brand\">corral</span>");
    if let Some(f) = frame {
        out.push_str("<nav aria-label=\"Console\"><ul>");
        for (path, label, admin_only) in NAV {
            if *admin_only && !f.admin {
                continue;
            }
            let here = if *path == current {
                " aria-current=\"page\""
            } else {
                ""
            };
            let _ = write!(out, "<li><a href=\"{path}\"{here}>{label}</a></li>");
        }
        out.push_str("</ul></nav>");
        let _ = write!(
            out,
            "<div class=\"who\"><span>Signed in as <strong>{}</strong> ({})</span>\
             <form method=\"post\" action=\"/ui/logout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Sign out</button></form></div>",
            exact(f.who),
            esc(&f.what),
            esc(f.csrf)
        );
    }
    out.push_str("</header>");
    if let Some(f) = frame
        && let Some((scenario, level)) = &f.learning
    {
        let _ = write!(
            out,
            "<section class=\"badge\" aria-label=\"Learning mode\"><span>Learning mode: \
             scenario <code>{}</code>, level <strong>{level}</strong> of 3</span>",
            exact(scenario),
        );
        if *level < 3 {
            let _ = write!(
                out,
                "<form method=\"post\" action=\"/ui/learning/hint\"><input type=\"hidden\" \
                 name=\"csrf\" value=\"{}\"><button type=\"submit\">Take a hint</button></form>",
                esc(f.csrf)
            );
        }
        out.push_str("</section>");
    }
    let _ = write!(
        out,
        "<main id=\"main\" tabindex=\"-1\"><h1>{}</h1>{body}</main></body></html>",
        esc(title)
    );
    out
}

/// The body of a refusal: the code, what is wrong and how to fix it, and the request id.
pub(crate) fn refusal(code: &str, message: &str, request_id: &str) -> String {
    let fix = corral_policy::codes::lookup(code).map_or("", |c| c.fix);
    format!(
        "<div class=\"error\" role=\"alert\"><p><code class=\"code\">{}</code></p><p>{}</p>\
         <p>How to fix: {}</p><p class=\"muted\">request {}</p></div>",
        esc(code),
        exact(message),
        esc(fix),
        esc(request_id)
    )
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (proleptic Gregorian), so every
/// page shows times the same way without a date library.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_leaves_no_markup_in_hostile_text() {
        let hostile = "<script>alert(1)</script>\"'><img src=x onerror=alert(1)>&amp;\0";
        let e = esc(hostile);
        for bad in ['<', '>', '"', '\'', '\0'] {
            assert!(!e.contains(bad), "{bad:?} left in {e}");
        }
        assert_eq!(
            esc("a&b<c>d\"e'f"),
            "a&amp;b&lt;c&gt;d&quot;e&#39;f".to_owned()
        );
    }

    #[test]
    fn esc_and_exact_are_safe_for_every_byte_and_char() {
        // Every single byte as text (lossy: invalid UTF-8 is what a handler could never get
        // past serde anyway), and every char of the first planes, alone and in a sequence.
        let mut all = String::new();
        for b in 0u8..=255 {
            let s = String::from_utf8_lossy(&[b]).into_owned();
            for out in [esc(&s), exact(&s)] {
                assert!(!out.contains(['<', '>', '"', '\'', '\0']) || out.contains("<span"));
            }
            all.push_str(&s);
        }
        for c in (0u32..0x3_0000).filter_map(char::from_u32) {
            all.push(c);
        }
        all.push('\u{E0100}');
        let e = esc(&all);
        assert!(!e.contains(['<', '>', '"', '\'', '\0']));
        // `exact` adds its own spans only: take them out and nothing else is markup.
        let x = exact(&all);
        let stripped = x
            .replace(
                "<span class=\"hidden-char\" title=\"an invisible character\">",
                "",
            )
            .replace("</span>", "");
        assert!(!stripped.contains(['<', '>', '"', '\'', '\0']));
        for c in [
            '\u{202E}',
            '\u{200B}',
            '\u{2066}',
            '\u{FEFF}',
            '\u{7}',
            '\u{85}',
            '\u{34F}',
            '\u{2028}',
            '\u{3164}',
            '\u{FE0F}',
            '\u{E0100}',
        ] {
            assert!(!x.contains(c), "{:?} shown as itself", c);
        }
    }

    #[test]
    fn exact_shows_a_bidi_override_instead_of_obeying_it() {
        assert_eq!(
            exact("a\u{202E}b"),
            "a<span class=\"hidden-char\" title=\"an invisible character\">\\u{202E}</span>b"
        );
        assert_eq!(exact("line\nnext\ttab"), "line\nnext\ttab");
    }

    #[test]
    fn utc_renders_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_300_000_123), "2026-12-03 12:13:20 UTC");
        assert_eq!(utc(-1000), "1969-12-31 23:59:59 UTC");
        assert!(!utc(i64::MAX).is_empty());
    }
}
