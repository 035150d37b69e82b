//! The `inproc-mock` backend: resolves a command only against a table of mocked responses.
//!
//! It holds no handle to the filesystem, the network, storage or secrets: all it owns is the
//! table it was built with. A command is identified by its resource name (its argv joined with
//! single spaces, exactly as given); a command missing from the table yields the deterministic
//! marker `[[mock-miss:<resource>]]` on stdout and exit code 127, and never reaches anything
//! real. State lives in the call and is dropped on return, so every run attests
//! `isolated: true, destroyed: true`. The lab's scenarios build on it.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::{Attestation, Backend, BoxFuture, ExecError, ExecOutput, ExecRequest};

/// One mocked response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockResponse {
    /// What the command prints on stdout.
    pub stdout: String,
    /// What it prints on stderr.
    pub stderr: String,
    /// Its exit code.
    pub exit_code: i32,
}

impl MockResponse {
    /// A successful response printing `stdout`.
    pub fn ok(stdout: &str) -> Self {
        Self {
            stdout: stdout.to_owned(),
            stderr: String::new(),
            exit_code: 0,
        }
    }
}

/// The marker a miss prints: `[[mock-miss:<resource>]]`.
pub fn miss_marker(resource: &str) -> String {
    format!("[[mock-miss:{resource}]]")
}

/// The resource name of a request: its argv joined with single spaces.
pub fn resource_of(req: &ExecRequest) -> String {
    req.argv.join(" ")
}

/// A backend that answers only from its table.
#[derive(Debug, Clone, Default)]
pub struct MockBackend {
    table: BTreeMap<String, MockResponse>,
}

impl MockBackend {
    /// A backend over a table of resource -> response.
    pub fn new(table: impl IntoIterator<Item = (String, MockResponse)>) -> Self {
        Self {
            table: table.into_iter().collect(),
        }
    }
}

fn cap(s: &str, max: u64) -> (Vec<u8>, bool) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let bytes = s.as_bytes();
    if bytes.len() > max {
        (bytes[..max].to_vec(), true)
    } else {
        (bytes.to_vec(), false)
    }
}

impl Backend for MockBackend {
    fn name(&self) -> &'static str {
        "inproc-mock"
    }

    fn preflight(&self) -> Result<(), ExecError> {
        Ok(())
    }

    fn run(&self, req: ExecRequest) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        Box::pin(async move {
            let started = Instant::now();
            if req.argv.is_empty() || req.argv.iter().any(|a| a.contains('\0')) {
                return Err(ExecError::Invalid(
                    "argv is empty or holds a NUL byte".to_owned(),
                ));
            }
            let resource = resource_of(&req);
            let response = match self.table.get(&resource) {
                Some(r) => r.clone(),
                None => MockResponse {
                    stdout: miss_marker(&resource),
                    stderr: String::new(),
                    exit_code: 127,
                },
            };
            let (stdout, stdout_truncated) = cap(&response.stdout, req.max_output_bytes);
            let (stderr, stderr_truncated) = cap(&response.stderr, req.max_output_bytes);
            Ok(ExecOutput {
                exit_code: Some(response.exit_code),
                signal: None,
                stdout,
                stderr,
                stdout_truncated,
                stderr_truncated,
                timed_out: false,
                duration: started.elapsed(),
                attestation: Attestation {
                    backend: "inproc-mock",
                    isolated: true,
                    destroyed: true,
                    primitives: vec!["mock:table".to_owned()],
                },
                changes: None,
            })
        })
    }
}
