//! The scenario manifest, contract v1: a strict parse of the lab's answer file.
//!
//! The lab's seeder states the answers it seeded:
//!
//! ```json
//! {"schema_version": 1, "scenario_id": "kafka-lag-7f3a", "seeded_at": "2026-10-30T10:00:00Z",
//!  "default_disclosure": 0,
//!  "targets": [{"id": "total_lag", "descriptor": "total lag of group orders-processor",
//!               "value": 5100, "unit": "messages"}]}
//! ```
//!
//! The parse is strict: an unknown field or `schema_version` is an error; JSON types are exact
//! (no `true` for 1, no `"2"` for 2, no `1.0` for an integer); a duplicate key is an error;
//! `seeded_at` is RFC 3339 with its offset (`Z` or `+hh:mm`); NaN and infinities cannot be
//! written in JSON and a number too large for an `f64` is a syntax error; every number is below
//! 2^53 in absolute value; `targets` holds at least one entry with unique ids;
//! `default_disclosure` is 0, 1 or 2 (absent reads as 0: level 3 is reachable only through
//! hints); a numeric value is at least 100 in absolute value, a string value at least 4
//! characters; ids are 1-128 characters of `[A-Za-z0-9._:-]`; and no value appears (as the
//! matcher would find it, words and separators included) inside a descriptor, a target id, a
//! unit or the scenario id. The schema has no field that could widen anything.
//!
//! **Errors never carry a value.** A [`ManifestError`] names the field path (`targets[1].value`)
//! and the kind of error only; the one piece of input it may repeat is an unknown key, and only
//! when that key is a plain identifier (`[a-z_]`, at most 32 characters) that contains no string
//! value of the document. Syntax errors give a line and column, never the text.
//!
//! **Only a regular file is read.** Symlinks are followed (a Kubernetes ConfigMap mount is a
//! chain of them, swapped atomically), and what they lead to must be a regular file of at most
//! [`MAX_MANIFEST_BYTES`]: a directory, FIFO, socket or device is refused before it is opened,
//! the file is opened non-blocking and checked again on the open handle (same inode, still
//! regular), so nothing swapped in between can hang the reader.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use corral_policy::codes;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The only contract version this crate reads.
pub const SCHEMA_VERSION: u64 = 1;
/// The largest manifest file read, in bytes.
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;
/// The smallest absolute numeric value a target may have.
pub const MIN_NUMBER: u64 = 100;
/// The fewest characters a string value may have.
pub const MIN_STRING_CHARS: usize = 4;
/// Numbers in a manifest are below this in absolute value (2^53: exact in an `f64`).
pub const MAX_SAFE: u64 = 1 << 53;
/// The environment variable naming the manifest file.
pub const MANIFEST_ENV: &str = "CORRAL_SCENARIO_MANIFEST";

/// A valid manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The scenario's id (not secret: it reaches `/healthz` and audit events).
    pub scenario_id: String,
    /// When the seeder wrote it.
    pub seeded_at: OffsetDateTime,
    /// The level every learner starts at, 0..=2.
    pub default_disclosure: u8,
    /// The answers, at least one, ids unique.
    pub targets: Vec<Target>,
}

/// One answer the guard withholds.
#[derive(Clone, PartialEq)]
pub struct Target {
    /// Its id (reaches audit events).
    pub id: String,
    /// What it is, in words; the guard's nudge is built from it.
    pub descriptor: String,
    /// The answer.
    pub value: Value,
    /// Its unit, if any.
    pub unit: Option<String>,
}

impl fmt::Debug for Target {
    // A target's value is the secret: no Debug output (a log line, a panic message) shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("id", &self.id)
            .field("descriptor", &self.descriptor)
            .field("value", &"<withheld>")
            .field("unit", &self.unit)
            .finish()
    }
}

/// A target's value.
#[derive(Clone, PartialEq)]
pub enum Value {
    /// An integral number (`5100`, or `5100.0`), |x| in [100, 2^53).
    Integer(i64),
    /// A number with a fractional part, |x| in [100, 2^53).
    Decimal(f64),
    /// A string of at least 4 characters.
    Text(String),
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Value::Integer(_) => "Integer",
            Value::Decimal(_) => "Decimal",
            Value::Text(_) => "Text",
        };
        write!(f, "{kind}(<withheld>)")
    }
}

/// Why a manifest was refused: every problem found, each by path and kind, never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The problems, in document order.
    pub issues: Vec<Issue>,
}

/// One problem of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Where: `targets[0].value`, or empty for the whole document.
    pub path: String,
    /// What.
    pub kind: IssueKind,
}

/// The kinds of problem. None carries input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueKind {
    /// The file could not be read (missing, unreadable).
    Unreadable(std::io::ErrorKind),
    /// The path leads to something that is not a regular file.
    NotRegularFile,
    /// The file is larger than [`MAX_MANIFEST_BYTES`].
    TooLarge,
    /// The file changed between the stat and the read.
    Changed,
    /// Not JSON (or a duplicate key, or a number out of range), at a line and column.
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// A required field is absent.
    Missing,
    /// A field the contract does not have.
    Unknown,
    /// A JSON type other than the one required.
    WrongType {
        /// What the field takes.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// `schema_version` is not one this crate reads.
    UnsupportedVersion,
    /// A number outside the allowed range (`0..=2`).
    OutOfRange(&'static str),
    /// A number of 2^53 or more in absolute value.
    Unsafe,
    /// Not an RFC 3339 timestamp with an offset.
    NotTimestamp,
    /// `targets` is empty.
    NoTargets,
    /// Two targets share an id.
    DuplicateId,
    /// An id with characters outside `[A-Za-z0-9._:-]`, empty, or longer than 128.
    BadId,
    /// An empty descriptor (or one longer than 1024 characters).
    BadDescriptor,
    /// A numeric value below 100 in absolute value.
    NumberTooSmall,
    /// A string value shorter than 4 characters.
    StringTooShort,
    /// The value appears inside another field (named by the string).
    ValueExposed(String),
}

impl IssueKind {
    /// The catalog code of this kind.
    pub fn code(&self) -> &'static str {
        match self {
            IssueKind::Unreadable(_)
            | IssueKind::NotRegularFile
            | IssueKind::TooLarge
            | IssueKind::Changed => codes::LEARNING_MANIFEST_UNREADABLE,
            IssueKind::Syntax { .. } => codes::LEARNING_MANIFEST_SYNTAX,
            IssueKind::ValueExposed(_) => codes::LEARNING_MANIFEST_VALUE_EXPOSED,
            IssueKind::Missing
            | IssueKind::Unknown
            | IssueKind::WrongType { .. }
            | IssueKind::UnsupportedVersion
            | IssueKind::OutOfRange(_)
            | IssueKind::Unsafe
            | IssueKind::NotTimestamp
            | IssueKind::NoTargets
            | IssueKind::DuplicateId
            | IssueKind::BadId
            | IssueKind::BadDescriptor
            | IssueKind::NumberTooSmall
            | IssueKind::StringTooShort => codes::LEARNING_MANIFEST_SCHEMA,
        }
    }

    fn describe(&self) -> String {
        match self {
            IssueKind::Unreadable(kind) => format!("cannot be read ({kind})"),
            IssueKind::NotRegularFile => "is not a regular file".into(),
            IssueKind::TooLarge => format!("is larger than {MAX_MANIFEST_BYTES} bytes"),
            IssueKind::Changed => "changed while it was read".into(),
            IssueKind::Syntax { line, column } => {
                format!("is not valid JSON, or repeats a key, at line {line} column {column}")
            }
            IssueKind::Missing => "is required".into(),
            IssueKind::Unknown => "is not a field of contract v1".into(),
            IssueKind::WrongType { expected, found } => format!("must be {expected}, not {found}"),
            IssueKind::UnsupportedVersion => format!("must be {SCHEMA_VERSION}"),
            IssueKind::OutOfRange(range) => format!("must be in {range}"),
            IssueKind::Unsafe => "must be below 2^53 in absolute value".into(),
            IssueKind::NotTimestamp => {
                "must be an RFC 3339 timestamp with a time zone offset (`Z` or `+hh:mm`)".into()
            }
            IssueKind::NoTargets => "must hold at least one target".into(),
            IssueKind::DuplicateId => "repeats the id of an earlier target".into(),
            IssueKind::BadId => {
                "must be 1-128 characters of letters, digits, `.`, `_`, `:` and `-`".into()
            }
            IssueKind::BadDescriptor => "must be 1-1024 characters".into(),
            IssueKind::NumberTooSmall => format!("must be at least {MIN_NUMBER} in absolute value"),
            IssueKind::StringTooShort => format!("must be at least {MIN_STRING_CHARS} characters"),
            IssueKind::ValueExposed(field) => format!("appears inside `{field}`"),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.kind.code();
        let fix = codes::lookup(code).map(|c| c.fix).unwrap_or("");
        let at = if self.path.is_empty() {
            "the manifest".to_owned()
        } else {
            format!("`{}`", self.path)
        };
        write!(
            f,
            "error[{code}]: {at} {}; {fix}; see: {}",
            self.kind.describe(),
            codes::doc_id(code)
        )
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for issue in &self.issues {
            if !first {
                f.write_str("\n")?;
            }
            first = false;
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    fn one(path: &str, kind: IssueKind) -> Self {
        Self {
            issues: vec![Issue {
                path: path.to_owned(),
                kind,
            }],
        }
    }

    /// The code of the first issue (every error has at least one).
    pub fn code(&self) -> &'static str {
        self.issues
            .first()
            .map(|i| i.kind.code())
            .unwrap_or(codes::LEARNING_MANIFEST_SCHEMA)
    }
}

/// What identifies one version of the file on disk: `stat()`'s device, inode, mtime, ctime
/// and size. Any change means the file must be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    size: u64,
}

impl FileStamp {
    /// The stamp of `stat(path)` (symlinks followed); `None` when it cannot be taken.
    pub fn of(path: &Path) -> Option<Self> {
        std::fs::metadata(path)
            .ok()
            .map(|m| Self::from_metadata(&m))
    }

    fn from_metadata(m: &std::fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            size: m.size(),
        }
    }
}

/// Reads and validates the manifest at `path`, with the stamp of what was read.
pub fn read_file(path: &Path) -> Result<(Manifest, FileStamp), ManifestError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| ManifestError::one("", IssueKind::Unreadable(e.kind())))?;
    check_regular(&meta)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| ManifestError::one("", IssueKind::Unreadable(e.kind())))?;
    let opened = file
        .metadata()
        .map_err(|e| ManifestError::one("", IssueKind::Unreadable(e.kind())))?;
    check_regular(&opened)?;
    if opened.dev() != meta.dev() || opened.ino() != meta.ino() {
        return Err(ManifestError::one("", IssueKind::Changed));
    }
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ManifestError::one("", IssueKind::Unreadable(e.kind())))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::one("", IssueKind::TooLarge));
    }
    let manifest = parse(&bytes)?;
    Ok((manifest, FileStamp::from_metadata(&opened)))
}

fn check_regular(meta: &std::fs::Metadata) -> Result<(), ManifestError> {
    if !meta.file_type().is_file() {
        return Err(ManifestError::one("", IssueKind::NotRegularFile));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::one("", IssueKind::TooLarge));
    }
    Ok(())
}

/// Parses and validates a manifest's bytes.
pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    let json: Json = serde_json::from_slice(bytes).map_err(|e| {
        ManifestError::one(
            "",
            IssueKind::Syntax {
                line: e.line(),
                column: e.column(),
            },
        )
    })?;
    let mut v = Validator {
        issues: Vec::new(),
        secrets: Vec::new(),
    };
    collect_string_values(&json, false, &mut v.secrets);
    let manifest = v.manifest(&json);
    match manifest {
        Some(m) if v.issues.is_empty() => {
            let mut issues = exposure_issues(&m);
            if issues.is_empty() {
                Ok(m)
            } else {
                issues.sort_by(|a, b| a.path.cmp(&b.path));
                Err(ManifestError { issues })
            }
        }
        _ => Err(ManifestError { issues: v.issues }),
    }
}

/// Every place a value appears in the manifest's other fields, found by the answer matcher
/// itself (so "five thousand one hundred" in a descriptor counts too).
fn exposure_issues(m: &Manifest) -> Vec<Issue> {
    let mut fields: Vec<(String, &str)> = vec![("scenario_id".into(), m.scenario_id.as_str())];
    for (i, t) in m.targets.iter().enumerate() {
        fields.push((format!("targets[{i}].id"), t.id.as_str()));
        fields.push((format!("targets[{i}].descriptor"), t.descriptor.as_str()));
        if let Some(u) = &t.unit {
            fields.push((format!("targets[{i}].unit"), u.as_str()));
        }
    }
    let values: Vec<Value> = m.targets.iter().map(|t| t.value.clone()).collect();
    let mut issues = Vec::new();
    let matcher = match crate::matcher::Matcher::new(&values) {
        Ok(matcher) => matcher,
        Err(_) => {
            return vec![Issue {
                path: "targets".into(),
                kind: IssueKind::OutOfRange("what the matcher can hold"),
            }];
        }
    };
    for (field, text) in &fields {
        for hit in matcher.find(text) {
            issues.push(Issue {
                path: format!("targets[{hit}].value"),
                kind: IssueKind::ValueExposed(field.clone()),
            });
        }
    }
    issues
}

fn collect_string_values(json: &Json, under_value: bool, out: &mut Vec<String>) {
    match json {
        Json::Str(s) if under_value => out.push(s.to_lowercase()),
        Json::Arr(items) => {
            for item in items {
                collect_string_values(item, under_value, out);
            }
        }
        Json::Obj(entries) => {
            for (k, item) in entries {
                collect_string_values(item, under_value || k == "value", out);
            }
        }
        _ => {}
    }
}

struct Validator {
    issues: Vec<Issue>,
    /// Every string under a `value` key, lowercased: an unknown key containing one is not named.
    secrets: Vec<String>,
}

impl Validator {
    fn push(&mut self, path: String, kind: IssueKind) {
        self.issues.push(Issue { path, kind });
    }

    /// The fields of `obj` (or a type error), with unknown keys reported.
    fn object<'j>(
        &mut self,
        path: &str,
        json: &'j Json,
        known: &[&str],
    ) -> Option<&'j [(String, Json)]> {
        let Json::Obj(entries) = json else {
            self.push(
                path.to_owned(),
                IssueKind::WrongType {
                    expected: "an object",
                    found: json.type_name(),
                },
            );
            return None;
        };
        for (key, _) in entries {
            if !known.contains(&key.as_str()) {
                let shown = self.key_shown(key);
                self.push(join(path, &shown), IssueKind::Unknown);
            }
        }
        Some(entries)
    }

    fn key_shown(&self, key: &str) -> String {
        let plain = !key.is_empty()
            && key.len() <= 32
            && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        let lower = key.to_lowercase();
        if plain && !self.secrets.iter().any(|s| lower.contains(s.as_str())) {
            key.to_owned()
        } else {
            "<unknown key>".into()
        }
    }

    fn manifest(&mut self, json: &Json) -> Option<Manifest> {
        let entries = self.object(
            "",
            json,
            &[
                "schema_version",
                "scenario_id",
                "seeded_at",
                "default_disclosure",
                "targets",
            ],
        )?;
        let version = self.required(entries, "", "schema_version").and_then(|j| {
            let n = self.integer("schema_version", j)?;
            if n != SCHEMA_VERSION as i64 {
                self.push("schema_version".into(), IssueKind::UnsupportedVersion);
                return None;
            }
            Some(n)
        });
        let scenario_id = self
            .required(entries, "", "scenario_id")
            .and_then(|j| self.id("scenario_id", j));
        let seeded_at = self
            .required(entries, "", "seeded_at")
            .and_then(|j| self.string("seeded_at", j))
            .and_then(|s| match OffsetDateTime::parse(s, &Rfc3339) {
                Ok(t) => Some(t),
                Err(_) => {
                    self.push("seeded_at".into(), IssueKind::NotTimestamp);
                    None
                }
            });
        let default_disclosure = match field(entries, "default_disclosure") {
            None => Some(0),
            Some(j) => self.integer("default_disclosure", j).and_then(|n| {
                if (0..=2).contains(&n) {
                    u8::try_from(n).ok()
                } else {
                    self.push(
                        "default_disclosure".into(),
                        IssueKind::OutOfRange("0..=2 (level 3 is reached only through hints)"),
                    );
                    None
                }
            }),
        };
        let targets = self.required(entries, "", "targets").and_then(|j| {
            let Json::Arr(items) = j else {
                self.push(
                    "targets".into(),
                    IssueKind::WrongType {
                        expected: "an array",
                        found: j.type_name(),
                    },
                );
                return None;
            };
            if items.is_empty() {
                self.push("targets".into(), IssueKind::NoTargets);
                return None;
            }
            let mut out = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                match self.target(&format!("targets[{i}]"), item) {
                    Some(t) => {
                        if out.iter().any(|o: &Target| o.id == t.id) {
                            self.push(format!("targets[{i}].id"), IssueKind::DuplicateId);
                            ok = false;
                        }
                        out.push(t);
                    }
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
        let _ = version?;
        Some(Manifest {
            scenario_id: scenario_id?,
            seeded_at: seeded_at?,
            default_disclosure: default_disclosure?,
            targets: targets?,
        })
    }

    fn target(&mut self, path: &str, json: &Json) -> Option<Target> {
        let entries = self.object(path, json, &["id", "descriptor", "value", "unit"])?;
        let id = self
            .required(entries, path, "id")
            .and_then(|j| self.id(&join(path, "id"), j));
        let descriptor = self
            .required(entries, path, "descriptor")
            .and_then(|j| self.string(&join(path, "descriptor"), j))
            .and_then(|s| {
                let n = s.chars().count();
                if n == 0 || n > 1024 || s.trim().is_empty() {
                    self.push(join(path, "descriptor"), IssueKind::BadDescriptor);
                    None
                } else {
                    Some(s.to_owned())
                }
            });
        let value = self
            .required(entries, path, "value")
            .and_then(|j| self.value(&join(path, "value"), j));
        let unit = match field(entries, "unit") {
            None => Some(None),
            Some(j) => self
                .string(&join(path, "unit"), j)
                .map(|s| Some(s.to_owned())),
        };
        Some(Target {
            id: id?,
            descriptor: descriptor?,
            value: value?,
            unit: unit?,
        })
    }

    fn value(&mut self, path: &str, json: &Json) -> Option<Value> {
        let small = |n: u64| n < MIN_NUMBER;
        match json {
            Json::U64(n) => {
                if *n >= MAX_SAFE {
                    self.push(path.into(), IssueKind::Unsafe);
                    None
                } else if small(*n) {
                    self.push(path.into(), IssueKind::NumberTooSmall);
                    None
                } else {
                    i64::try_from(*n).ok().map(Value::Integer)
                }
            }
            Json::I64(n) => {
                let abs = n.unsigned_abs();
                if abs >= MAX_SAFE {
                    self.push(path.into(), IssueKind::Unsafe);
                    None
                } else if small(abs) {
                    self.push(path.into(), IssueKind::NumberTooSmall);
                    None
                } else {
                    Some(Value::Integer(*n))
                }
            }
            Json::F64(x) => {
                if !x.is_finite() || x.abs() >= MAX_SAFE as f64 {
                    self.push(path.into(), IssueKind::Unsafe);
                    None
                } else if x.abs() < MIN_NUMBER as f64 {
                    self.push(path.into(), IssueKind::NumberTooSmall);
                    None
                } else if x.fract() == 0.0 {
                    // |x| < 2^53, so the conversion is exact.
                    #[expect(clippy::cast_possible_truncation, reason = "integral and below 2^53")]
                    Some(Value::Integer(*x as i64))
                } else {
                    Some(Value::Decimal(*x))
                }
            }
            Json::Str(s) => {
                // Counted as the matcher reads it: zero-width characters and the blanks around
                // it do not count.
                if crate::matcher::normalize(s).trim().chars().count() < MIN_STRING_CHARS {
                    self.push(path.into(), IssueKind::StringTooShort);
                    None
                } else {
                    Some(Value::Text(s.clone()))
                }
            }
            other => {
                self.push(
                    path.into(),
                    IssueKind::WrongType {
                        expected: "a number or a string",
                        found: other.type_name(),
                    },
                );
                None
            }
        }
    }

    fn required<'j>(
        &mut self,
        entries: &'j [(String, Json)],
        path: &str,
        name: &str,
    ) -> Option<&'j Json> {
        let found = field(entries, name);
        if found.is_none() {
            self.push(join(path, name), IssueKind::Missing);
        }
        found
    }

    fn integer(&mut self, path: &str, json: &Json) -> Option<i64> {
        match json {
            Json::U64(n) if *n < MAX_SAFE => i64::try_from(*n).ok(),
            Json::I64(n) if n.unsigned_abs() < MAX_SAFE => Some(*n),
            Json::U64(_) | Json::I64(_) => {
                self.push(path.into(), IssueKind::Unsafe);
                None
            }
            other => {
                self.push(
                    path.into(),
                    IssueKind::WrongType {
                        expected: "an integer",
                        found: other.type_name(),
                    },
                );
                None
            }
        }
    }

    fn string<'j>(&mut self, path: &str, json: &'j Json) -> Option<&'j str> {
        match json {
            Json::Str(s) => Some(s),
            other => {
                self.push(
                    path.into(),
                    IssueKind::WrongType {
                        expected: "a string",
                        found: other.type_name(),
                    },
                );
                None
            }
        }
    }

    fn id(&mut self, path: &str, json: &Json) -> Option<String> {
        let s = self.string(path, json)?;
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if ok {
            Some(s.to_owned())
        } else {
            self.push(path.into(), IssueKind::BadId);
            None
        }
    }
}

fn field<'j>(entries: &'j [(String, Json)], name: &str) -> Option<&'j Json> {
    entries.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// A JSON document as read: numbers keep their JSON type, objects their order, and a duplicate
/// key is a parse error.
enum Json {
    Null,
    Bool,
    U64(u64),
    I64(i64),
    F64(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool => "a boolean",
            Json::U64(_) | Json::I64(_) => "an integer",
            Json::F64(_) => "a number with a fraction or exponent",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Json, E> {
        Ok(Json::Bool)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::I64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::F64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries: Vec<(String, Json)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if entries.iter().any(|(k, _)| *k == key) {
                // No key in the message: serde_json adds the line and column.
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value::<Json>()?;
            entries.push((key, value));
        }
        Ok(Json::Obj(entries))
    }
}
