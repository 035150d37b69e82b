//! Reading a request body under the server's size limit. An oversized body is drained (read
//! and discarded, up to `DRAIN_MAX_BYTES` and `DRAIN_MAX_TIME`) before the 413 is answered, so
//! a client that sends its whole body before reading the answer (Python's `requests`, most
//! HTTP/1.1 clients) gets the 413 instead of a connection reset while it is still sending.

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use corral_policy::codes;

use crate::error::ApiError;

/// The most an oversized body is read (in total) to answer its 413 cleanly; beyond it the
/// connection is closed.
pub(crate) const DRAIN_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The longest an oversized body is read to answer its 413 cleanly.
pub(crate) const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// Why a body was not read.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Over the limit. `drained`: the rest of the body was read, so the connection stays
    /// usable; otherwise the answer closes it.
    TooLarge {
        /// Whether the whole body was read.
        drained: bool,
    },
    /// The body could not be read (the client went away, a bad chunk).
    Read(String),
}

impl BodyError {
    /// The wire error: `413 limit.body_too_large` (with `Connection: close` when the body was
    /// not drained) or `400 args.malformed`.
    pub(crate) fn response(&self, limit: usize, op: Option<&str>, rid: &str) -> Response {
        match self {
            BodyError::TooLarge { drained } => {
                let mut resp = ApiError::new(
                    codes::LIMIT_BODY_TOO_LARGE,
                    format!("the request body is over {limit} bytes; send a smaller body"),
                    op,
                    rid,
                )
                .into_response();
                if !drained {
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                resp
            }
            BodyError::Read(e) => ApiError::new(
                codes::ARGS_MALFORMED,
                format!("the request body could not be read: {e}"),
                op,
                rid,
            )
            .into_response(),
        }
    }

    /// The status and code, for the audit.
    pub(crate) fn status_code(&self) -> (u16, &'static str) {
        match self {
            BodyError::TooLarge { .. } => (413, codes::LIMIT_BODY_TOO_LARGE),
            BodyError::Read(_) => (400, codes::ARGS_MALFORMED),
        }
    }
}

/// The `Content-Length` a request declares, if any (and parseable).
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The next data chunk of `body`: `None` at its end (trailers are skipped).
async fn next_data(body: &mut Body) -> Option<Result<Bytes, axum::Error>> {
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        match frame {
            Err(e) => return Some(Err(e)),
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    return Some(Ok(data));
                }
            }
        }
    }
}

/// Reads `body` whole if it is at most `limit` bytes; an oversized one is drained first.
pub(crate) async fn read(
    mut body: Body,
    limit: usize,
    declared: Option<u64>,
) -> Result<Bytes, BodyError> {
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    if declared.is_some_and(|n| n > limit64) {
        let drained = drain(body, 0, declared).await;
        return Err(BodyError::TooLarge { drained });
    }
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = next_data(&mut body).await {
        let data = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
        if data.len() > limit.saturating_sub(buf.len()) {
            let seen = u64::try_from(buf.len() + data.len()).unwrap_or(u64::MAX);
            drop(buf);
            let drained = drain(body, seen, declared).await;
            return Err(BodyError::TooLarge { drained });
        }
        buf.extend_from_slice(&data);
    }
    Ok(Bytes::from(buf))
}

/// Reads and discards the rest of `body` (`seen` bytes already read), within the drain
/// bounds; whether it reached the end.
async fn drain(mut body: Body, seen: u64, declared: Option<u64>) -> bool {
    if declared.is_some_and(|n| n > DRAIN_MAX_BYTES) {
        return false;
    }
    let rest = async move {
        let mut seen = seen;
        while let Some(chunk) = next_data(&mut body).await {
            let Ok(data) = chunk else {
                return false;
            };
            seen = seen.saturating_add(u64::try_from(data.len()).unwrap_or(u64::MAX));
            if seen > DRAIN_MAX_BYTES {
                return false;
            }
        }
        true
    };
    tokio::time::timeout(DRAIN_MAX_TIME, rest)
        .await
        .unwrap_or(false)
}
