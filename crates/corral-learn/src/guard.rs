//! The answer guard: on a root response's text parts, below level 3, a matched value replaces
//! the text with a fixed nudge.
//!
//! [`check`] (or [`Guard::check`], which first refreshes the manifest) takes the text parts of
//! one non-partial root response, in order, and whether it carries tool calls. At level 3 it
//! does nothing. Otherwise every part, and all parts joined, go through the matcher, and so
//! does their join with what the learner saw right before ([`check_after`]: the request's
//! earlier assistant messages, the completion's earlier choices), so a value split over two
//! responses is caught where it is completed; on a match:
//!
//! - the first match of the turn replaces the text parts with one nudge built from the first
//!   matched target's descriptor and the level ([`nudge`]); the nudge itself goes through the
//!   matcher, and if it matches, a fixed generic line is used, and if that matches, `(…)`
//!   (three characters: no value of 4+ characters or 3+ digits fits in it);
//! - a later match in the same turn ([`TurnState`]) drops the text when the response carries
//!   tool calls (it keeps only its tool calls), or becomes a fixed short line;
//! - tool calls are never touched, and no text part is ever left empty: the parts are either one
//!   non-empty line or none (with tool calls);
//! - the original strings are dropped here; the [`Outcome`] names the targets and scenarios
//!   only, for the `learning_answer_withheld` audit event.

use std::sync::Arc;

use crate::levels::Level;
use crate::manifest::ManifestError;
use crate::matcher::Matcher;
use crate::watch::{Snapshot, Watcher};

/// The last resort: too short to hold any value (strings have 4+ characters, numbers 3+ digits).
pub const LAST_RESORT: &str = "(…)";
/// The generic line used when a nudge would itself state a value.
pub const GENERIC_NUDGE: &str =
    "I can't give that value yet. Keep working from the evidence you have.";
/// The short line for a later match in the same turn.
pub const SHORT_LINE: &str = "(answer withheld)";

/// What the guard remembers within one turn (one learner message and every response to it).
#[derive(Debug, Default, Clone)]
pub struct TurnState {
    nudged: bool,
}

impl TurnState {
    /// A new turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether this turn already carried its nudge.
    pub fn nudged(&self) -> bool {
        self.nudged
    }
}

/// A target the guard withheld, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// The scenario the target belongs to.
    pub scenario_id: String,
    /// The target's id.
    pub target_id: String,
}

/// What replaced the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// The turn's nudge (or its generic fallback).
    Nudge,
    /// The fixed short line of a later match.
    ShortLine,
    /// Nothing: a later match in a response with tool calls keeps only its tool calls.
    ToolCallsOnly,
}

/// What the guard did to one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Level 3: nothing was checked.
    Unguarded,
    /// Nothing matched; the text is unchanged.
    Clean,
    /// A value matched and the text was replaced (audit `learning_answer_withheld`).
    Withheld {
        /// The scenario in force.
        scenario_id: String,
        /// Every matched target, in manifest order.
        targets: Vec<Withheld>,
        /// What the text became.
        replacement: Replacement,
    },
}

/// The guard's result, with the error of a manifest reload that failed on this call (to be
/// logged and counted; the last good manifest was used).
#[derive(Debug)]
pub struct Checked {
    /// What happened to the text.
    pub outcome: Outcome,
    /// A failed reload, if this call found one.
    pub manifest_error: Option<ManifestError>,
}

/// The guard over a watched manifest.
#[derive(Debug, Clone)]
pub struct Guard {
    watcher: Arc<Watcher>,
}

impl Guard {
    /// A guard reading the manifest through `watcher`.
    pub fn new(watcher: Arc<Watcher>) -> Self {
        Self { watcher }
    }

    /// The watcher.
    pub fn watcher(&self) -> &Watcher {
        &self.watcher
    }

    /// Refreshes the manifest (a `stat()`, a reload on change), then [`check`]s the response.
    pub fn check(
        &self,
        level: Level,
        turn: &mut TurnState,
        texts: &mut Vec<String>,
        has_tool_calls: bool,
    ) -> Checked {
        self.check_after(level, turn, &[], texts, has_tool_calls)
    }

    /// Refreshes the manifest, then [`check_after`]s the response after what the learner saw.
    pub fn check_after(
        &self,
        level: Level,
        turn: &mut TurnState,
        seen: &[&str],
        texts: &mut Vec<String>,
        has_tool_calls: bool,
    ) -> Checked {
        let refresh = self.watcher.check();
        Checked {
            outcome: check_after(&refresh.snapshot, level, turn, seen, texts, has_tool_calls),
            manifest_error: refresh.error,
        }
    }
}

/// Checks one response's text parts against `snapshot` (see the module docs), on its own.
pub fn check(
    snapshot: &Snapshot,
    level: Level,
    turn: &mut TurnState,
    texts: &mut Vec<String>,
    has_tool_calls: bool,
) -> Outcome {
    check_after(snapshot, level, turn, &[], texts, has_tool_calls)
}

/// Checks one response's text parts against `snapshot`, in the context of what the learner
/// saw right before it (`seen`, oldest first: the request's earlier assistant messages, then
/// the choices before this one in the same completion). A target matched only across the
/// join of `seen` and the new text is withheld as if the new text stated it (the new text is
/// replaced; `seen` is never rewritten). See [`joined_hits`] for the joins.
pub fn check_after(
    snapshot: &Snapshot,
    level: Level,
    turn: &mut TurnState,
    seen: &[&str],
    texts: &mut Vec<String>,
    has_tool_calls: bool,
) -> Outcome {
    if level.is_unguarded() {
        return Outcome::Unguarded;
    }
    let matcher = snapshot.matcher();
    let mut hits: Vec<usize> = Vec::new();
    let mut add = |found: Vec<usize>| {
        for h in found {
            if !hits.contains(&h) {
                hits.push(h);
            }
        }
    };
    for text in texts.iter() {
        add(matcher.find(text));
    }
    if texts.len() > 1 || !seen.is_empty() {
        let new = texts.concat();
        if texts.len() > 1 {
            add(matcher.find(&new));
        }
        add(joined_hits(matcher, seen, &new));
    }
    if hits.is_empty() {
        return Outcome::Clean;
    }
    hits.sort_unstable();
    let guarded = snapshot.guarded();
    let targets: Vec<Withheld> = hits
        .iter()
        .filter_map(|h| guarded.get(*h))
        .map(|g| Withheld {
            scenario_id: g.scenario_id.clone(),
            target_id: g.target.id.clone(),
        })
        .collect();
    let replacement = if !turn.nudged {
        turn.nudged = true;
        let descriptor = hits
            .first()
            .and_then(|h| guarded.get(*h))
            .map(|g| g.target.descriptor.as_str())
            .unwrap_or("");
        let line = first_clean(
            snapshot,
            &[nudge(level, descriptor).as_str(), GENERIC_NUDGE],
        );
        *texts = vec![line];
        Replacement::Nudge
    } else if has_tool_calls {
        texts.clear();
        Replacement::ToolCallsOnly
    } else {
        *texts = vec![first_clean(snapshot, &[SHORT_LINE])];
        Replacement::ShortLine
    };
    Outcome::Withheld {
        scenario_id: snapshot.manifest().scenario_id.clone(),
        targets,
        replacement,
    }
}

/// How many bytes of what the learner saw are joined with a new text, beyond the longest form
/// of any value: room for a number in words (its longest reading, with separators) and a unit.
pub const SEEN_TAIL_SLACK: usize = 256;

/// The targets matched only across the join of `seen` and `new` (the reading a learner makes
/// of two messages in a row), never those `seen` states on its own (the learner saw them
/// already: the history is never rewritten, and the new text did not give them).
///
/// `seen`'s pieces and `new` are joined twice: edge to edge (`5` `1` `00` reads `5100`,
/// `orders-` `7` reads `orders-7`) and with a space (`five thousand` `one hundred`). Only the
/// tail of the joined `seen` is read, with the head of `new` (each the longest form of a value
/// plus [`SEEN_TAIL_SLACK`] bytes, the head to the next space), so the join costs the same
/// whatever the lengths; a number in words that began
/// further back than that is not joined (a residual risk, as is a history the client did not
/// send: the check is stateless, it reads only the request).
pub fn joined_hits(matcher: &Matcher, seen: &[&str], new: &str) -> Vec<usize> {
    let mut out = Vec::new();
    if seen.is_empty() || new.is_empty() {
        return out;
    }
    let keep = matcher.longest_form().saturating_add(SEEN_TAIL_SLACK);
    let new = head(new, keep);
    // (the tail read, what it states on its own)
    let mut last: Option<(String, Vec<usize>)> = None;
    for sep in ["", " "] {
        let before = tail(&seen.join(sep), keep).to_owned();
        if before.is_empty() {
            continue;
        }
        if !sep.is_empty()
            && (before.ends_with(|c: char| c.is_ascii_whitespace())
                || new.starts_with(|c: char| c.is_ascii_whitespace()))
        {
            // A space is already at the join: edge to edge read it as written.
            continue;
        }
        let already = match last.take() {
            // One piece of history: the same tail for both joins, read once.
            Some((t, hits)) if t == before => hits,
            _ => matcher.find(&before),
        };
        last = Some((before.clone(), already.clone()));
        let mut joined = before;
        joined.push_str(sep);
        joined.push_str(new);
        for h in matcher.find(&joined) {
            if !already.contains(&h) && !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out.sort_unstable();
    out
}

/// The first `keep` bytes of `s`, extended to the next ASCII whitespace (or the end): a value
/// across the join ends within them, and the rest of `s` is checked on its own already. Cut
/// at a space, a value is never split (a space-grouped number or words may read shorter,
/// which withholds more, never less).
fn head(s: &str, keep: usize) -> &str {
    let cut = s
        .as_bytes()
        .iter()
        .enumerate()
        .skip(keep)
        .find(|(_, b)| b.is_ascii_whitespace())
        .map_or(s.len(), |(i, _)| i);
    s.get(..cut).unwrap_or(s)
}

/// The last `keep` bytes of `s` (or a few more, to start on a character).
fn tail(s: &str, keep: usize) -> &str {
    let mut start = s.len().saturating_sub(keep);
    while !s.is_char_boundary(start) {
        start -= 1;
    }
    s.get(start..).unwrap_or(s)
}

fn first_clean(snapshot: &Snapshot, lines: &[&str]) -> String {
    lines
        .iter()
        .find(|l| !snapshot.matcher().is_match(l))
        .copied()
        .unwrap_or(LAST_RESORT)
        .to_owned()
}

/// The nudge for a target's `descriptor` at `level` (before it is run through the matcher).
pub fn nudge(level: Level, descriptor: &str) -> String {
    let next = match level.get() {
        0 => format!(
            "work out the {descriptor} yourself. Which data would show it, and how would you read it?"
        ),
        1 => format!("find where the {descriptor} is recorded, then read it there yourself."),
        _ => format!(
            "you are one step from the {descriptor}. Take that step yourself, or ask for a hint."
        ),
    };
    format!("I can't give that value yet. Here's what to look at next: {next}")
}
