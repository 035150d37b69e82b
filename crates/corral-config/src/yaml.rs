//! A YAML (and so JSON) document as a tree of nodes that remember where they were written.
//!
//! `yaml-rust2`'s event parser gives a position for every event; this module builds the tree
//! from those events so every config error can point at a line and column.

use std::fmt;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where a node was written: a byte range plus the 1-based line and column of its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Byte offset of the start.
    pub offset: usize,
    /// Length in bytes (at least 1 where the source has anything there).
    pub len: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.col)
    }
}

/// A value in the document.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`, `~` or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (accepted only to report that it is not an integer).
    Float(String),
    /// A string (any quoted scalar, or a plain one that is not null, bool or number).
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in document order.
    Map(Vec<(Key, Node)>),
}

/// A mapping key.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key text.
    pub name: String,
    /// Where the key was written.
    pub span: Span,
}

/// A value and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where it was written.
    pub span: Span,
}

impl Node {
    /// A short name of the node's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// Every string scalar in the tree, with its span (for the secret scan).
    pub fn strings(&self, out: &mut Vec<(String, Span)>) {
        match &self.value {
            Value::Str(s) => out.push((s.clone(), self.span)),
            Value::Seq(items) => items.iter().for_each(|n| n.strings(out)),
            Value::Map(entries) => entries.iter().for_each(|(_, n)| n.strings(out)),
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {}
        }
    }
}

/// A syntax error with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// What the parser said.
    pub message: String,
    /// Where.
    pub span: Span,
}

/// Deeper documents are refused, so walking the tree can never exhaust the stack.
const MAX_DEPTH: usize = 64;

enum Frame {
    Seq(Span, Vec<Node>),
    Map(Span, Vec<(Key, Node)>, Option<Key>),
}

struct Builder<'s> {
    /// Byte offset of each char index, so spans are byte ranges.
    char_to_byte: Vec<usize>,
    src: &'s str,
    stack: Vec<Frame>,
    root: Option<Node>,
    docs: usize,
    error: Option<SyntaxError>,
}

impl Builder<'_> {
    fn span(&self, mark: Marker, len_chars: usize) -> Span {
        let start = self
            .char_to_byte
            .get(mark.index())
            .copied()
            .unwrap_or(self.src.len());
        let end = self
            .char_to_byte
            .get(mark.index() + len_chars)
            .copied()
            .unwrap_or(self.src.len());
        Span {
            offset: start,
            len: end
                .saturating_sub(start)
                .max(usize::from(start < self.src.len())),
            line: mark.line(),
            col: mark.col() + 1,
        }
    }

    fn fail(&mut self, message: &str, span: Span) {
        if self.error.is_none() {
            self.error = Some(SyntaxError {
                message: message.to_owned(),
                span,
            });
        }
    }

    fn push_node(&mut self, node: Node) {
        if matches!(self.stack.last(), Some(Frame::Map(_, _, None)))
            && matches!(node.value, Value::Seq(_) | Value::Map(_))
        {
            self.fail("a mapping key must be a plain string", node.span);
            return;
        }
        match self.stack.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some(Frame::Seq(_, items)) => items.push(node),
            Some(Frame::Map(_, entries, pending)) => match pending.take() {
                Some(key) => {
                    if entries.iter().any(|(k, _)| k.name == key.name) {
                        let span = key.span;
                        let msg = format!("the key `{}` appears twice in this mapping", key.name);
                        self.fail(&msg, span);
                    } else {
                        entries.push((key, node));
                    }
                }
                None => {
                    let name = match node.value {
                        Value::Str(s) | Value::Float(s) => s,
                        Value::Int(i) => i.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => String::new(),
                        Value::Seq(_) | Value::Map(_) => String::new(),
                    };
                    *pending = Some(Key {
                        name,
                        span: node.span,
                    });
                }
            },
        }
    }
}

fn plain_scalar(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        _ => {
            if let Ok(i) = s.parse::<i64>() {
                Value::Int(i)
            } else if s.parse::<f64>().is_ok()
                && s.bytes().any(|b| b.is_ascii_digit())
                && !s.chars().any(char::is_alphabetic)
            {
                Value::Float(s.to_owned())
            } else {
                Value::Str(s.to_owned())
            }
        }
    }
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::DocumentStart => {
                self.docs += 1;
                if self.docs > 1 {
                    let span = self.span(mark, 3);
                    self.fail("the config must be a single document", span);
                }
            }
            Event::Alias(_) => {
                let span = self.span(mark, 1);
                self.fail(
                    "anchors and aliases (`*name`) are not supported in the config",
                    span,
                );
            }
            Event::Scalar(text, style, anchor, _) => {
                if anchor != 0 {
                    let span = self.span(mark, 1);
                    self.fail("anchors (`&name`) are not supported in the config", span);
                    return;
                }
                let quoted = !matches!(style, TScalarStyle::Plain);
                let len = text.chars().count() + if quoted { 2 } else { 0 };
                let span = self.span(mark, len.max(1));
                let value = if quoted {
                    Value::Str(text)
                } else {
                    plain_scalar(&text)
                };
                self.push_node(Node { value, span });
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) if anchor != 0 => {
                let span = self.span(mark, 1);
                self.fail("anchors (`&name`) are not supported in the config", span);
            }
            Event::SequenceStart(..) | Event::MappingStart(..) if self.stack.len() >= MAX_DEPTH => {
                let span = self.span(mark, 1);
                self.fail("the config is nested more than 64 levels deep", span);
            }
            Event::SequenceStart(..) => {
                let span = self.span(mark, 1);
                self.stack.push(Frame::Seq(span, Vec::new()));
            }
            Event::MappingStart(..) => {
                let span = self.span(mark, 1);
                self.stack.push(Frame::Map(span, Vec::new(), None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.stack.pop() {
                    Some(Frame::Seq(span, items)) => Node {
                        value: Value::Seq(items),
                        span,
                    },
                    Some(Frame::Map(span, entries, _)) => {
                        // yaml-rust2 marks a block mapping at its first key's `:`; the mapping
                        // starts at that key.
                        let span = match entries.first() {
                            Some((k, _)) if k.span.offset < span.offset => k.span,
                            Some(_) | None => span,
                        };
                        Node {
                            value: Value::Map(entries),
                            span,
                        }
                    }
                    None => return,
                };
                self.push_node(node);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

/// Parses YAML (JSON is YAML) into a spanned tree. An empty document is `Null`.
pub fn parse(src: &str) -> Result<Node, SyntaxError> {
    let mut char_to_byte: Vec<usize> = src.char_indices().map(|(i, _)| i).collect();
    char_to_byte.push(src.len());
    let mut b = Builder {
        char_to_byte,
        src,
        stack: Vec::new(),
        root: None,
        docs: 0,
        error: None,
    };
    let mut parser = Parser::new_from_str(src);
    if let Err(e) = parser.load(&mut b, true) {
        let m = *e.marker();
        let span = b.span(m, 1);
        return Err(SyntaxError {
            message: e.info().to_owned(),
            span,
        });
    }
    if let Some(e) = b.error {
        return Err(e);
    }
    Ok(b.root.unwrap_or(Node {
        value: Value::Null,
        span: Span {
            offset: 0,
            len: 0,
            line: 1,
            col: 1,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_point_at_lines_and_columns() {
        let Ok(n) = parse("version: 1\nrules:\n  - allow: [files.read]\n") else {
            unreachable!("valid yaml")
        };
        let Value::Map(entries) = &n.value else {
            unreachable!("a map")
        };
        assert_eq!(entries[1].0.name, "rules");
        assert_eq!((entries[1].0.span.line, entries[1].0.span.col), (2, 1));
        let Value::Seq(rules) = &entries[1].1.value else {
            unreachable!("a seq")
        };
        let Value::Map(rule) = &rules[0].value else {
            unreachable!("a map")
        };
        assert_eq!((rule[0].0.span.line, rule[0].0.span.col), (3, 5));
    }

    #[test]
    fn a_block_mapping_starts_at_its_first_key() {
        let src = "rules:\n  - name: r\n    allow: [files.read]\n";
        let Ok(n) = parse(src) else {
            unreachable!("valid yaml")
        };
        assert_eq!((n.span.line, n.span.col, n.span.offset), (1, 1, 0));
        let Value::Map(entries) = &n.value else {
            unreachable!("a map")
        };
        let Value::Seq(rules) = &entries[0].1.value else {
            unreachable!("a seq")
        };
        let s = rules[0].span;
        assert_eq!((s.line, s.col), (2, 5));
        assert_eq!(&src[s.offset..s.offset + s.len], "name");
        let Ok(flow) = parse("a: {b: 1}\n") else {
            unreachable!("valid yaml")
        };
        let Value::Map(entries) = &flow.value else {
            unreachable!("a map")
        };
        assert_eq!(
            entries[0].1.span.col, 4,
            "a flow mapping starts at its brace"
        );
    }

    #[test]
    fn json_parses_too_and_duplicates_are_errors() {
        assert!(parse(r#"{"version": 1, "root": "/w"}"#).is_ok());
        let Err(e) = parse("a: 1\na: 2\n") else {
            unreachable!("duplicate keys are refused")
        };
        assert_eq!(e.span.line, 2);
        assert!(parse("a: &x 1\nb: *x\n").is_err());
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(
            parse(&deep).is_err(),
            "deep nesting is refused, not a stack overflow"
        );
    }
}
