//! The declarative workflow variant: a YAML list of op calls whose arguments are templated from
//! the step's input and the answers of earlier calls, and an output template.
//!
//! ```yaml
//! name: lookup
//! version: 2
//! steps:
//!   - op: files.read
//!     args: {path: "/data/{{input}}.txt"}
//!     as: account
//!   - op: http.fetch
//!     args: {url: "https://api.example.test/u/{{steps.account.content}}"}
//!     as: profile
//! output: "{{steps.account.content}} / {{steps.profile.body}}"
//! ```
//!
//! Templating is substitution only, no code: in every string of `args` and in `output`,
//! `{{input}}` is the step's input, `{{steps.<as>}}` an earlier call's whole answer and
//! `{{steps.<as>.<field>.<field>}}` a field in it (a number picks a list item). A string answer is
//! inserted as it is, anything else as its canonical JSON; other YAML scalars (numbers, booleans,
//! null) pass as they are. A malformed template or a name the step cannot see (`{{steps.x}}` of
//! a later or unknown step, an unclosed `{{`) is a load error (`lab.workflow_template`) with the
//! line and column; a field missing from an actual answer fails that scenario step with the same
//! code. The templates of one call's arguments, and the output, render at most 1 MiB
//! ([`MAX_RENDERED_BYTES`]): past it the step fails with `lab.output_too_large`, and the call
//! is not made. A refused call or a miss ends the scenario step as an error with its code (a miss's
//! output is its marker `[[mock-miss:<op> <canonical args>]]`); later calls are not made.

use corral_config::yaml::{self, Key, Node, Span, Value as Y};
use corral_exec::BoxFuture;
use corral_guard::Reply;
use corral_guard::canonical::canonical;
use corral_policy::{OpId, codes};
use serde_json::{Map, Value};

use crate::agent::{Agent, StepCtx, StepOutcome};
use crate::scenario::op_resource;
use crate::world::World;

/// Why a workflow did not load: a code, the message, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {message}")]
pub struct WorkflowError {
    /// `lab.workflow_invalid` or `lab.workflow_template`.
    pub code: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

fn err(code: &'static str, span: Span, message: impl Into<String>) -> WorkflowError {
    WorkflowError {
        code,
        message: message.into(),
        line: span.line,
        col: span.col,
    }
}

fn invalid(span: Span, message: impl Into<String>) -> WorkflowError {
    err(codes::LAB_WORKFLOW_INVALID, span, message)
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    Lit(String),
    Input,
    /// An earlier call's answer (by index), and a path into it.
    Step(usize, Vec<String>),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
struct Template(Vec<Part>);

/// A templated JSON value (the `args` of a call).
#[derive(Debug, Clone, PartialEq)]
enum Arg {
    Plain(Value),
    Text(Template),
    List(Vec<Arg>),
    Object(Vec<(String, Arg)>),
}

/// One call of a workflow.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    op: String,
    args: Arg,
}

/// A loaded workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Workflow {
    name: String,
    version: String,
    calls: Vec<Call>,
    /// Each call's name for messages: its `as`, or `#<n>`.
    names: Vec<String>,
    output: Template,
}

/// The names templates of the n-th call may use: the `as` of the calls before it.
fn parse_template(
    s: &str,
    span: Span,
    visible: &[Option<String>],
) -> Result<Template, WorkflowError> {
    let bad = |m: String| err(codes::LAB_WORKFLOW_TEMPLATE, span, m);
    let mut parts = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            parts.push(Part::Lit(rest[..open].to_owned()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(bad(format!(
                "`{s}` opens `{{{{` without closing it; write `{{{{input}}}}` or `{{{{steps.<as>}}}}`"
            )));
        };
        let name = after[..close].trim();
        let part = if name == "input" {
            Part::Input
        } else if let Some(path) = name.strip_prefix("steps.") {
            let mut segs = path.split('.');
            let step = segs.next().unwrap_or("");
            let fields: Vec<String> = segs.map(str::to_owned).collect();
            if fields.iter().any(String::is_empty) || step.is_empty() {
                return Err(bad(format!(
                    "`{{{{{name}}}}}` has an empty name between dots; write `{{{{steps.<as>.<field>}}}}`"
                )));
            }
            match visible.iter().position(|v| v.as_deref() == Some(step)) {
                Some(i) => Part::Step(i, fields),
                None => {
                    let known: Vec<String> =
                        visible.iter().flatten().map(|v| format!("`{v}`")).collect();
                    return Err(bad(format!(
                        "`{{{{{name}}}}}` refers to step `{step}`, which no earlier step names with `as`{}",
                        if known.is_empty() {
                            String::new()
                        } else {
                            format!(" (it may use {})", known.join(", "))
                        }
                    )));
                }
            }
        } else {
            return Err(bad(format!(
                "`{{{{{name}}}}}` is not a name a template knows; use `{{{{input}}}}`, `{{{{steps.<as>}}}}` or `{{{{steps.<as>.<field>}}}}`"
            )));
        };
        parts.push(part);
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        parts.push(Part::Lit(rest.to_owned()));
    }
    Ok(Template(parts))
}

fn arg_of(n: &Node, visible: &[Option<String>]) -> Result<Arg, WorkflowError> {
    Ok(match &n.value {
        Y::Null => Arg::Plain(Value::Null),
        Y::Bool(b) => Arg::Plain(Value::Bool(*b)),
        Y::Int(i) => Arg::Plain(Value::from(*i)),
        Y::Float(f) => match f.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            Some(x) => Arg::Plain(Value::Number(x)),
            None => return Err(invalid(n.span, format!("`{f}` is not a finite number"))),
        },
        Y::Str(s) => {
            let t = parse_template(s, n.span, visible)?;
            match t.0.as_slice() {
                [] => Arg::Plain(Value::String(String::new())),
                [Part::Lit(l)] => Arg::Plain(Value::String(l.clone())),
                _ => Arg::Text(t),
            }
        }
        Y::Seq(items) => Arg::List(
            items
                .iter()
                .map(|i| arg_of(i, visible))
                .collect::<Result<_, _>>()?,
        ),
        Y::Map(entries) => Arg::Object(
            entries
                .iter()
                .map(|(k, v)| Ok((k.name.clone(), arg_of(v, visible)?)))
                .collect::<Result<_, WorkflowError>>()?,
        ),
    })
}

fn only_keys(entries: &[(Key, Node)], allowed: &[&str], what: &str) -> Result<(), WorkflowError> {
    match entries
        .iter()
        .find(|(k, _)| !allowed.contains(&k.name.as_str()))
    {
        None => Ok(()),
        Some((k, _)) => Err(invalid(
            k.span,
            format!(
                "unknown key `{}` in {what}; it has {}",
                k.name,
                allowed
                    .iter()
                    .map(|a| format!("`{a}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// A step's `op`: a valid op id that answers JSON (a streamed op's bytes could feed no later
/// step and no `output`).
fn step_op<'n>(entries: &'n [(Key, Node)], s: &Node) -> Result<&'n str, WorkflowError> {
    let op_node =
        get(entries, "op").ok_or_else(|| invalid(s.span, "the step needs `op` (an op id)"))?;
    let op = string(op_node, "`op`")?;
    OpId::parse(op).map_err(|e| invalid(op_node.span, e.to_string()))?;
    if corral_policy::STREAMED_OPS.contains(&op) {
        return Err(err(
            codes::LAB_WORKFLOW_STREAMED_OP,
            op_node.span,
            format!(
                "step `{op}` answers a stream (a file's bytes), not JSON, so no later \
                 step or `output` could use its answer; read text with `files.read` \
                 instead, or drop the step"
            ),
        ));
    }
    Ok(op)
}

fn get<'n>(entries: &'n [(Key, Node)], key: &str) -> Option<&'n Node> {
    entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v)
}

fn string<'n>(n: &'n Node, what: &str) -> Result<&'n str, WorkflowError> {
    match &n.value {
        Y::Str(s) => Ok(s),
        _ => Err(invalid(
            n.span,
            format!("{what} must be a string, not {}", n.type_name()),
        )),
    }
}

fn valid_as(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Workflow {
    /// Loads a workflow from its YAML text.
    pub fn from_yaml(src: &str) -> Result<Self, WorkflowError> {
        let root = yaml::parse(src).map_err(|e| {
            invalid(
                e.span,
                format!("the workflow is not valid YAML: {}", e.message),
            )
        })?;
        let Y::Map(top) = &root.value else {
            return Err(invalid(
                root.span,
                "a workflow is a mapping with `name`, `version`, `steps` and `output`",
            ));
        };
        only_keys(top, &["name", "version", "steps", "output"], "the workflow")?;
        let need = |key: &str| {
            get(top, key).ok_or_else(|| invalid(root.span, format!("the workflow needs `{key}`")))
        };
        let name = string(need("name")?, "`name`")?.to_owned();
        let version_node = need("version")?;
        let version = match &version_node.value {
            Y::Str(s) => s.clone(),
            Y::Int(i) => i.to_string(),
            Y::Float(f) => f.clone(),
            _ => {
                return Err(invalid(
                    version_node.span,
                    "`version` is a string or a number",
                ));
            }
        };
        let steps_node = need("steps")?;
        let Y::Seq(steps) = &steps_node.value else {
            return Err(invalid(
                steps_node.span,
                "`steps` is a list of `{op, args?, as?}`",
            ));
        };
        if steps.is_empty() {
            return Err(invalid(
                steps_node.span,
                "`steps` is empty; add at least one `{op, args?, as?}`",
            ));
        }
        let mut visible: Vec<Option<String>> = Vec::new();
        let mut calls = Vec::new();
        for s in steps {
            let Y::Map(entries) = &s.value else {
                return Err(invalid(s.span, "a step is a mapping `{op, args?, as?}`"));
            };
            only_keys(entries, &["op", "args", "as"], "a step")?;
            let op = step_op(entries, s)?;
            let args = match get(entries, "args") {
                None => Arg::Object(Vec::new()),
                Some(
                    a @ Node {
                        value: Y::Map(_), ..
                    },
                ) => arg_of(a, &visible)?,
                Some(a) => {
                    return Err(invalid(
                        a.span,
                        format!("`args` is a mapping, not {}", a.type_name()),
                    ));
                }
            };
            let as_name = match get(entries, "as") {
                None => None,
                Some(n) => {
                    let a = string(n, "`as`")?;
                    if !valid_as(a) {
                        return Err(invalid(
                            n.span,
                            format!(
                                "`as: {a}` must start with a letter or `_` and hold only letters, digits, `_` and `-`"
                            ),
                        ));
                    }
                    if visible.iter().flatten().any(|v| v == a) {
                        return Err(invalid(
                            n.span,
                            format!(
                                "`as: {a}` is already the name of an earlier step; names are unique"
                            ),
                        ));
                    }
                    Some(a.to_owned())
                }
            };
            visible.push(as_name);
            calls.push(Call {
                op: op.to_owned(),
                args,
            });
        }
        let out_node = need("output")?;
        let output = parse_template(string(out_node, "`output`")?, out_node.span, &visible)?;
        let names = visible
            .iter()
            .enumerate()
            .map(|(i, v)| v.clone().unwrap_or_else(|| format!("#{}", i + 1)))
            .collect();
        Ok(Self {
            name,
            version,
            calls,
            names,
            output,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its version, as written.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// How many op calls one scenario step makes (when none fails).
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// The ops its steps call, in order, each once: the tools a replay's load-time check walks
    /// (`corral_ops::replay::check_tools`).
    pub fn tools(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.calls
            .iter()
            .map(|c| c.op.as_str())
            .filter(|op| seen.insert(*op))
            .collect()
    }
}

/// The most text the templates of one call's arguments, or of the output, may render, in
/// bytes (1 MiB, what the store keeps of a step's output): a few placeholders repeating a large
/// answer must not make the lab hold gigabytes.
pub const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// A template that could not be filled from the actual answers.
enum Unfilled {
    /// A field missing from an answer: the message.
    Missing(String),
    /// The rendered text would pass [`MAX_RENDERED_BYTES`].
    TooLarge,
}

/// Appends `text` to `out` within what is left of the rendering budget.
fn push_within(out: &mut String, text: &str, left: &mut usize) -> Result<(), Unfilled> {
    *left = left.checked_sub(text.len()).ok_or(Unfilled::TooLarge)?;
    out.push_str(text);
    Ok(())
}

fn pick<'v>(mut v: &'v Value, path: &[String]) -> Option<&'v Value> {
    for seg in path {
        v = match v {
            Value::Object(m) => m.get(seg)?,
            Value::Array(items) => items.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

fn render(
    t: &Template,
    input: &str,
    answers: &[Value],
    names: &[&str],
    left: &mut usize,
) -> Result<String, Unfilled> {
    let mut out = String::new();
    for p in &t.0 {
        match p {
            Part::Lit(l) => push_within(&mut out, l, left)?,
            Part::Input => push_within(&mut out, input, left)?,
            Part::Step(i, path) => {
                let v = answers.get(*i).and_then(|a| pick(a, path)).ok_or_else(|| {
                    let name = names.get(*i).copied().unwrap_or("?");
                    let shown = std::iter::once(format!("steps.{name}"))
                        .chain(path.iter().cloned())
                        .collect::<Vec<_>>()
                        .join(".");
                    Unfilled::Missing(format!(
                        "`{{{{{shown}}}}}`: the answer of step `{name}` has no such field"
                    ))
                })?;
                match v {
                    Value::String(s) => push_within(&mut out, s, left)?,
                    other => push_within(&mut out, &canonical(other), left)?,
                }
            }
        }
    }
    Ok(out)
}

fn fill(
    a: &Arg,
    input: &str,
    answers: &[Value],
    names: &[&str],
    left: &mut usize,
) -> Result<Value, Unfilled> {
    Ok(match a {
        Arg::Plain(v) => v.clone(),
        Arg::Text(t) => Value::String(render(t, input, answers, names, left)?),
        Arg::List(items) => Value::Array(
            items
                .iter()
                .map(|i| fill(i, input, answers, names, left))
                .collect::<Result<_, _>>()?,
        ),
        Arg::Object(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k.clone(), fill(v, input, answers, names, left)?);
            }
            Value::Object(m)
        }
    })
}

/// A failed step from a template that could not be filled, `what` saying where.
fn unfilled(u: Unfilled, what: String) -> StepOutcome {
    match u {
        Unfilled::Missing(m) => StepOutcome::Failed {
            output: String::new(),
            code: codes::LAB_WORKFLOW_TEMPLATE,
            message: format!("{what}: {m}"),
        },
        Unfilled::TooLarge => StepOutcome::Failed {
            output: String::new(),
            code: codes::LAB_OUTPUT_TOO_LARGE,
            message: format!(
                "{what}: the templates would render over {MAX_RENDERED_BYTES} bytes (1 MiB); have the workflow repeat less of the answers"
            ),
        },
    }
}

impl Agent for Workflow {
    fn variant(&self) -> String {
        format!("workflow:{}@{}", self.name, self.version)
    }

    fn step<'a>(
        &'a self,
        world: &'a World,
        ctx: StepCtx,
        input: &'a str,
    ) -> BoxFuture<'a, StepOutcome> {
        Box::pin(async move {
            let names: Vec<&str> = self.names.iter().map(String::as_str).collect();
            let mut answers: Vec<Value> = Vec::with_capacity(self.calls.len());
            for (i, call) in self.calls.iter().enumerate() {
                let mut left = MAX_RENDERED_BYTES;
                let args = match fill(&call.args, input, &answers, &names, &mut left) {
                    Ok(a) => a,
                    Err(u) => return unfilled(u, format!("call {} (`{}`)", i + 1, call.op)),
                };
                let resource = || op_resource(&call.op, &args);
                match world.call(ctx.call(i + 1), &call.op, args.clone()).await {
                    Reply::Json(v) => answers.push(v),
                    Reply::Refused(r) => return StepOutcome::refused(&r, resource),
                    // Refused at load for the built-in streamed ops; any other op that answers
                    // a stream fails its step the same way, never as corral's own error.
                    Reply::Stream(_) => {
                        return StepOutcome::Failed {
                            output: String::new(),
                            code: codes::LAB_WORKFLOW_STREAMED_OP,
                            message: format!(
                                "call {} (`{}`) answered a stream (bytes), not JSON, which a workflow cannot use; read text with `files.read` instead",
                                i + 1,
                                call.op
                            ),
                        };
                    }
                }
            }
            let mut left = MAX_RENDERED_BYTES;
            match render(&self.output, input, &answers, &names, &mut left) {
                Ok(out) => StepOutcome::Ok(out),
                Err(u) => unfilled(u, "`output`".to_owned()),
            }
        })
    }
}
