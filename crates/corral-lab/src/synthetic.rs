//! Synthetic inputs: spec 003's local fixture generator (a template, a subject kind and a count
//! give `samples: [{key, input}]`), with its exact substitutions, defaults and limits.
//!
//! - Substitutions are `{{index}}` (1, 2, ... count) and `{{subject_kind}}`, nothing else. The
//!   template is scanned once, left to right: every other byte is literal (other `{{...}}` text,
//!   newlines, a trailing newline), and a substituted value is never scanned again, so a subject
//!   kind that contains `{{index}}` stays literal.
//! - Defaults: subject kind `agent`, count 10, template `{{subject_kind}}-sample-{{index}}`.
//! - Limits: 1 <= count <= 100, subject kind <= 200 bytes, template <= 8192 bytes, each generated
//!   input <= 8192 bytes, and the batch, encoded as a scenario create request (its steps, JSON
//!   escaping included, plus room for the largest name, description and subject kind, each
//!   escaped at worst), fits the scenario API's 1 MiB request limit. A request over any limit is
//!   rejected whole with a typed error ([`SyntheticError`], each with a stable `lab.synthetic_*`
//!   code); no partial set is ever returned.
//! - `key` of the sample with index `i` is `sample-<i>` (`sample-1`, `sample-2`, ...): stable,
//!   unique in the batch, and independent of the template, so a sample keeps its key when the
//!   template changes.
//!
//! Generation is pure: it stores nothing, reads no clock and no randomness, and the same request
//! gives the same batch.

use corral_policy::codes;
use serde::{Deserialize, Serialize};

/// The subject kind when the request names none.
pub const DEFAULT_SUBJECT_KIND: &str = "agent";
/// The count when the request names none.
pub const DEFAULT_COUNT: u64 = 10;
/// The template when the request names none.
pub const DEFAULT_TEMPLATE: &str = "{{subject_kind}}-sample-{{index}}";
/// The largest count.
pub const MAX_COUNT: u64 = 100;
/// The largest subject kind, in characters.
pub const MAX_SUBJECT_CHARS: usize = 200;
/// The largest template, in characters.
pub const MAX_TEMPLATE_CHARS: usize = 8192;
/// The largest generated input, in bytes.
pub const MAX_INPUT_BYTES: usize = 8192;
/// The scenario API's request limit: the encoded batch must fit it.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// The largest scenario name (and the batch leaves room for it), in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// The largest scenario description (and the batch leaves room for it), in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4096;

/// The substitution for the sample's index (from 1).
const INDEX: &str = "{{index}}";
/// The substitution for the subject kind.
const SUBJECT_KIND: &str = "{{subject_kind}}";

/// A generation request, as `POST /v1/sandbox/synthetic-data` takes it (spec 003's body:
/// `{"subject_kind": "agent", "count": 2, "seed": "{{subject_kind}}:user{{index}}@example.test"}`).
/// Every field is optional; a missing one takes its default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The subject kind (`{{subject_kind}}`); default `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_kind: Option<String>,
    /// How many samples; default 10. (A `u64`, so any count a client can send gets the typed
    /// range error.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The template (spec 003 calls it the seed); default `{{subject_kind}}-sample-{{index}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

/// One generated input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// `sample-<index>`, index from 1.
    pub key: String,
    /// The template with its substitutions made.
    pub input: String,
}

/// A generated batch: what the synthetic-data endpoint answers (`{"samples": [...]}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The samples, in index order.
    pub samples: Vec<Sample>,
}

/// Why a request was rejected (whole: no sample of it is returned).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntheticError {
    /// The count is 0 or over 100.
    #[error(
        "the synthetic count {count} is out of range (`count`); ask for 1 to {MAX_COUNT} samples"
    )]
    Count {
        /// The count asked for.
        count: u64,
    },
    /// The subject kind is over 200 characters.
    #[error(
        "the subject kind is {chars} characters, over the {MAX_SUBJECT_CHARS}-character limit (`subject_kind`); use a shorter subject kind"
    )]
    SubjectTooLong {
        /// Its length.
        chars: usize,
    },
    /// The template is over 8192 characters.
    #[error(
        "the template is {chars} characters, over the {MAX_TEMPLATE_CHARS}-character limit (`seed`, the seed file); shorten the template"
    )]
    TemplateTooLong {
        /// Its length (at least; a reader may stop past the limit).
        chars: usize,
    },
    /// The template is not UTF-8 text.
    #[error(
        "the template is not UTF-8 text (byte {offset} of the seed file); save the seed file as UTF-8"
    )]
    TemplateNotUtf8 {
        /// The offset of the first byte that is not valid UTF-8.
        offset: usize,
    },
    /// A generated input is over 8192 bytes.
    #[error(
        "the input of sample {index} would be {bytes} bytes, over the {MAX_INPUT_BYTES}-byte limit (`seed` with `subject_kind` substituted); shorten the template or the subject kind"
    )]
    InputTooLong {
        /// The sample's index (from 1).
        index: u32,
        /// The input's size.
        bytes: usize,
    },
    /// The encoded batch does not fit the scenario API's 1 MiB request limit.
    #[error(
        "the batch would be {bytes} bytes as a scenario create request (with room for its name, description and subject kind), over the {MAX_REQUEST_BYTES}-byte request limit (`count` x `seed`); ask for fewer samples or use a shorter template"
    )]
    BatchTooLarge {
        /// The encoded size with the room reserved.
        bytes: usize,
    },
}

impl SyntheticError {
    /// The stable code of the error (`docs/errors.md#<code>`).
    pub fn code(&self) -> &'static str {
        match self {
            SyntheticError::Count { .. } => codes::LAB_SYNTHETIC_COUNT,
            SyntheticError::SubjectTooLong { .. } => codes::LAB_SYNTHETIC_SUBJECT_TOO_LONG,
            SyntheticError::TemplateTooLong { .. } => codes::LAB_SYNTHETIC_TEMPLATE_TOO_LONG,
            SyntheticError::TemplateNotUtf8 { .. } => codes::LAB_SYNTHETIC_TEMPLATE_NOT_TEXT,
            SyntheticError::InputTooLong { .. } => codes::LAB_SYNTHETIC_INPUT_TOO_LONG,
            SyntheticError::BatchTooLarge { .. } => codes::LAB_SYNTHETIC_BATCH_TOO_LARGE,
        }
    }
}

/// The most bytes a template of [`MAX_TEMPLATE_CHARS`] characters takes in UTF-8: what a reader
/// of a seed file needs to read (one byte more is enough to refuse it by its size).
pub const MAX_TEMPLATE_BYTES: usize = MAX_TEMPLATE_CHARS * 4;

/// Reads a template from a seed file's bytes (`--seed-file F`, or stdin for `-`), newlines kept.
/// A reader should hand over at most `MAX_TEMPLATE_BYTES + 1` bytes: anything longer is refused
/// by its size alone.
pub fn template_from_bytes(bytes: &[u8]) -> Result<String, SyntheticError> {
    let too_long = |chars| SyntheticError::TemplateTooLong { chars };
    if bytes.len() > MAX_TEMPLATE_BYTES {
        return Err(too_long(bytes.len() / 4));
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if s.chars().count() > MAX_TEMPLATE_CHARS => Err(too_long(s.chars().count())),
        Ok(s) => Ok(s.to_owned()),
        Err(e) => Err(SyntheticError::TemplateNotUtf8 {
            offset: e.valid_up_to(),
        }),
    }
}

/// Generates the batch a request asks for, or rejects it whole.
pub fn generate(request: &Request) -> Result<Batch, SyntheticError> {
    let count = request.count.unwrap_or(DEFAULT_COUNT);
    let Some(count) = u32::try_from(count)
        .ok()
        .filter(|c| (1..=MAX_COUNT).contains(&u64::from(*c)))
    else {
        return Err(SyntheticError::Count { count });
    };
    let subject = request
        .subject_kind
        .as_deref()
        .unwrap_or(DEFAULT_SUBJECT_KIND);
    let chars = subject.chars().count();
    if chars > MAX_SUBJECT_CHARS {
        return Err(SyntheticError::SubjectTooLong { chars });
    }
    let template = request.seed.as_deref().unwrap_or(DEFAULT_TEMPLATE);
    let chars = template.chars().count();
    if chars > MAX_TEMPLATE_CHARS {
        return Err(SyntheticError::TemplateTooLong { chars });
    }
    let mut samples = Vec::with_capacity(count as usize);
    for index in 1..=count {
        let input = render(template, subject, index);
        if input.len() > MAX_INPUT_BYTES {
            return Err(SyntheticError::InputTooLong {
                index,
                bytes: input.len(),
            });
        }
        samples.push(Sample {
            key: format!("sample-{index}"),
            input,
        });
    }
    let batch = Batch { samples };
    let bytes = batch.request_bytes();
    if bytes > MAX_REQUEST_BYTES {
        return Err(SyntheticError::BatchTooLarge { bytes });
    }
    Ok(batch)
}

/// The template with `{{index}}` and `{{subject_kind}}` substituted, in one left-to-right pass.
fn render(template: &str, subject: &str, index: u32) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix(INDEX) {
            out.push_str(&index.to_string());
            rest = after;
        } else if let Some(after) = tail.strip_prefix(SUBJECT_KIND) {
            out.push_str(subject);
            rest = after;
        } else {
            // A `{` that opens no substitution is literal; scan again from the next byte, so
            // `{{{index}}` gives `{` and then the index.
            out.push('{');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The worst-case size of a string of `chars` characters as a JSON string body: every
/// character as a surrogate pair of `\uXXXX` escapes.
const fn escaped_worst(chars: usize) -> usize {
    chars * 12
}

impl Batch {
    /// The steps of a scenario made of the batch, one `{"input": ...}` per sample in order: the
    /// JSON `corral sandbox scenarios create --steps-file` takes (and the `steps` of the create
    /// request).
    pub fn steps(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.samples
                .iter()
                .map(|s| serde_json::json!({ "input": s.input }))
                .collect(),
        )
    }

    /// The size of the batch as a scenario create request: its steps, JSON-encoded, plus room for
    /// the largest name, description and subject kind with every byte escaped, and the request's
    /// keys and punctuation.
    pub fn request_bytes(&self) -> usize {
        let steps = serde_json::to_string(&self.steps()).map_or(usize::MAX, |s| s.len());
        // `{"name":"","description":"","subject_kind":"","steps":}` and the mocks key's `[]`.
        const ENVELOPE: usize = 64 + 12;
        steps.saturating_add(
            ENVELOPE
                + escaped_worst(MAX_NAME_CHARS)
                + escaped_worst(MAX_DESCRIPTION_CHARS)
                + escaped_worst(MAX_SUBJECT_CHARS),
        )
    }

    /// The inputs, in order.
    pub fn inputs(&self) -> impl Iterator<Item = &str> {
        self.samples.iter().map(|s| s.input.as_str())
    }
}
