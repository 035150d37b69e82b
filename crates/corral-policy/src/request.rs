//! A call to decide: the op, the caller and the arguments, plus schema checks of the arguments.

use std::collections::BTreeMap;

use crate::codes;
use crate::op::{OpSpec, ParamKind};
use crate::scope::command::is_word;

/// One argument value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    /// Text.
    Str(String),
    /// An integer.
    Int(i64),
    /// A flag.
    Bool(bool),
    /// A list of strings (an argv).
    List(Vec<String>),
    /// A JSON value as compact JSON text, for a `json` param (never interpreted by the policy).
    Json(String),
}

/// The arguments of a call, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args(pub BTreeMap<String, ArgValue>);

impl Args {
    /// No arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an argument.
    pub fn with(mut self, name: &str, value: ArgValue) -> Self {
        self.0.insert(name.to_owned(), value);
        self
    }

    /// Adds a string argument.
    pub fn str(self, name: &str, value: &str) -> Self {
        self.with(name, ArgValue::Str(value.to_owned()))
    }

    /// Looks an argument up.
    pub fn get(&self, name: &str) -> Option<&ArgValue> {
        self.0.get(name)
    }

    /// A string argument, if present and a string.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        match self.0.get(name) {
            Some(ArgValue::Str(s)) => Some(s),
            Some(ArgValue::Int(_) | ArgValue::Bool(_) | ArgValue::List(_) | ArgValue::Json(_))
            | None => None,
        }
    }
}

/// A call to decide.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The op id as the caller wrote it.
    pub op: &'a str,
    /// The caller.
    pub principal: &'a crate::Principal,
    /// The arguments.
    pub args: &'a Args,
}

/// An argument that does not fit the op's schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArgError {
    /// `args.missing`, `args.invalid`, `args.unknown` or `args.path_too_long`.
    pub code: &'static str,
    /// The argument's name.
    pub param: String,
    /// What is wrong.
    pub message: String,
}

/// The longest path the kernel takes (`PATH_MAX`, with its final NUL).
pub const PATH_MAX: usize = 4096;
/// The longest file name the kernel takes (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Why `path` is too long for the kernel (`PATH_MAX` in all, `NAME_MAX` for a component), in
/// words; `None` when it fits. Checked before any syscall, so the caller gets a 400 that names
/// the limit instead of the system's "File name too long".
pub fn path_too_long(path: &str) -> Option<String> {
    if path.len() >= PATH_MAX {
        return Some(format!(
            "is {} bytes long; a path may be at most {} bytes (PATH_MAX)",
            path.len(),
            PATH_MAX - 1
        ));
    }
    path.split('/').find(|c| c.len() > NAME_MAX).map(|c| {
        format!(
            "has a component of {} bytes; a file name may be at most {NAME_MAX} bytes (NAME_MAX)",
            c.len()
        )
    })
}

/// Checks arguments against the op's parameters: names, types, required ones, path lengths, and that a
/// command is given as exactly one of `argv` or `command`.
pub fn validate_args(op: &OpSpec, args: &Args) -> Result<(), ArgError> {
    let err = |code, param: &str, message: String| ArgError {
        code,
        param: param.to_owned(),
        message,
    };
    for (name, value) in &args.0 {
        let Some(p) = op.params.iter().find(|p| &p.name == name) else {
            return Err(err(
                codes::ARGS_UNKNOWN,
                name,
                format!("op `{}` has no parameter `{name}`", op.id),
            ));
        };
        let ok = match (&p.kind, value) {
            (ParamKind::Int, ArgValue::Int(_))
            | (ParamKind::Bool, ArgValue::Bool(_))
            | (ParamKind::Argv, ArgValue::List(_))
            | (ParamKind::Json, ArgValue::Json(_)) => true,
            (ParamKind::Word, ArgValue::Str(s)) => is_word(s),
            (ParamKind::Enum(values), ArgValue::Str(s)) => values.contains(s),
            (
                ParamKind::Path { .. }
                | ParamKind::Cwd
                | ParamKind::CommandLine
                | ParamKind::Url
                | ParamKind::String,
                ArgValue::Str(s),
            ) => !s.contains('\0'),
            (_, _) => false,
        };
        if !ok {
            let expected = match &p.kind {
                ParamKind::Enum(values) => format!("one of {}", values.join(", ")),
                ParamKind::Path { .. }
                | ParamKind::Cwd
                | ParamKind::CommandLine
                | ParamKind::Url
                | ParamKind::String => format!("a {} without a NUL character", p.kind.name()),
                k => format!("a {}", k.name()),
            };
            return Err(err(
                codes::ARGS_INVALID,
                name,
                format!("argument `{name}` of `{}` must be {expected}", op.id),
            ));
        }
    }
    for (name, value) in &args.0 {
        let is_path = op
            .params
            .iter()
            .any(|p| &p.name == name && matches!(p.kind, ParamKind::Path { .. } | ParamKind::Cwd));
        if let (true, ArgValue::Str(s)) = (is_path, value)
            && let Some(why) = path_too_long(s)
        {
            return Err(err(
                codes::ARGS_PATH_TOO_LONG,
                name,
                format!("argument `{name}` of `{}` {why}", op.id),
            ));
        }
    }
    if let Some(p) = op
        .params
        .iter()
        .find(|p| p.required && !args.0.contains_key(&p.name))
    {
        return Err(err(
            codes::ARGS_MISSING,
            &p.name,
            format!("op `{}` needs the argument `{}`", op.id, p.name),
        ));
    }
    let has = |k: ParamKind| {
        op.params
            .iter()
            .any(|p| p.kind == k && args.0.contains_key(&p.name))
    };
    if op.params.iter().any(|p| p.kind == ParamKind::Argv) {
        match (has(ParamKind::Argv), has(ParamKind::CommandLine)) {
            (true, true) => {
                return Err(err(
                    codes::ARGS_INVALID,
                    "command",
                    "give `argv` or `command`, never both".to_owned(),
                ));
            }
            (false, false) => {
                return Err(err(
                    codes::ARGS_MISSING,
                    "argv",
                    format!(
                        "op `{}` needs `argv` (a list) or `command` (a string)",
                        op.id
                    ),
                ));
            }
            (true, false) | (false, true) => {}
        }
    }
    Ok(())
}
