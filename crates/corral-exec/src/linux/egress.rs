//! corral's egress proxy: the only way out of a sandbox whose network is an allow-list
//! (`network: {allow: [...]}`). One per run, a tokio task of the parent.
//!
//! The sandbox's helper hands the parent a socket listening on the sandbox's own
//! `127.0.0.1:`[`PROXY_PORT`] (see `egress_bridge.rs`); the program finds it through
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and their lowercase forms). For each connection the
//! proxy reads one request head, `CONNECT host:port` or a plain-HTTP request with an absolute
//! `http://` URI, and:
//!
//! 1. checks `host:port` against the run's allow-list (exact name, `*.` subdomains, exact port);
//! 2. resolves the name once, and refuses if any address is internal (loopback, private,
//!    link-local, CGNAT, multicast, unspecified, cloud metadata: `corral_policy`'s
//!    `is_private_ip`, the check `http.fetch` uses) unless the admitting entry is that address;
//! 3. connects to exactly the address it checked and relays bytes both ways (a plain-HTTP
//!    request is forwarded in origin form with the checked `Host` and `Connection: close`, so every request of the
//!    program is a new connection, checked again). Redirects are the program's business: the
//!    next request comes through here and is checked like the first.
//!
//! An agent's run has both on its one socket ([`Served::Both`]): a request in origin form is
//! its corral link's (the LLM proxy), any other the proxy's as above.
//!
//! A refusal is a `403` whose reason phrase and plain-text body name `egress.denied` and why.
//! Every connection, allowed or refused, gives one [`EgressRecord`] (host, port, address, bytes
//! each way, reason), never a byte of payload.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use corral_policy::scope::{EgressAllowList, EgressRefusal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};
use tokio::sync::{Semaphore, watch};

use super::egress_bridge::HELLO;
pub use super::egress_bridge::PROXY_PORT;

/// Where a program finds corral's own API in a sandbox with a [`crate::CorralLink`].
pub const CORRAL_LINK_URL: &str = "http://127.0.0.1:3128";
use super::unavailable;
use crate::{CorralLink, Egress, EgressRecord, ExecError};

/// What the parent does with the connections of the sandbox's listening socket.
#[derive(Debug, Clone)]
pub(crate) enum Served {
    /// The egress proxy: each connection is checked against the allow-list and relayed.
    Egress(Egress),
    /// Corral's own API: each connection is served by the link.
    Corral(CorralLink),
    /// Both on one socket: a connection whose request is in origin form is the link's, any
    /// other the egress proxy's ([`for_link`]).
    Both(CorralLink, Egress),
}

/// The stable code of a refusal (`corral_policy::codes::EGRESS_DENIED`).
pub const DENIED: &str = corral_policy::codes::EGRESS_DENIED;
/// Largest request head read, bytes.
const MAX_HEAD: usize = 16 * 1024;
/// How long a program may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a link-and-egress connection may take to show its request line's start.
const PEEK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving a name, and connecting, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the helper may take to hand its listening socket over.
const HAND_OVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections of one run open at once; more wait in the sandbox's listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// Connections of one run a corral link serves at once (each holds buffers in corral's own
/// memory: a request head, a body up to the server's limit); more wait in the backlog.
pub const MAX_LINK_CONNECTIONS: usize = 16;
/// How long, once the run ended, its connections get to write their records.
const FINISH_GRACE: Duration = Duration::from_secs(2);

/// What `NO_PROXY` exempts in a run whose one socket is both a corral link and the egress
/// proxy: the sandbox's loopback, where the link is (nothing else listens there that the
/// program did not start itself).
pub const LOOPBACK_NO_PROXY: &str = "127.0.0.1,localhost,::1";

/// The environment the program gets: every proxy variable it knows points at the proxy, and
/// only `no_proxy` (a `NO_PROXY` list: empty, or [`LOOPBACK_NO_PROXY`]) is exempt.
pub fn proxy_env(no_proxy: &str) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env: Vec<(String, String)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k.to_owned(), url.clone()))
    .collect();
    env.push(("NO_PROXY".to_owned(), no_proxy.to_owned()));
    env.push(("no_proxy".to_owned(), no_proxy.to_owned()));
    env
}

/// `env` with its own proxy settings replaced by [`proxy_env`]`(no_proxy)`.
pub(crate) fn with_proxy_env(env: &[(String, String)], no_proxy: &str) -> Vec<(String, String)> {
    let ours = proxy_env(no_proxy);
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| !ours.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)))
        .cloned()
        .collect();
    out.extend(ours);
    out
}

/// A run's proxy: first its hand-over socket, then (once the helper sent the listening
/// socket) its accept loop. Dropped, everything stops and the socket file is removed.
#[derive(Debug)]
pub(crate) struct Proxy {
    path: PathBuf,
    handover: Option<UnixListener>,
    cancel: Option<watch::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Proxy {
    /// Binds the hand-over socket in corral's private runtime directory.
    pub(crate) fn bind(runtime_dir: &Path, run: &str) -> Result<Self, ExecError> {
        let path = runtime_dir.join(format!("{run}.egress"));
        let _ = std::fs::remove_file(&path);
        let handover = UnixListener::bind(&path).map_err(|e| {
            unavailable(format!(
                "egress: cannot make the proxy's socket {}: {e}",
                path.display()
            ))
        })?;
        Ok(Proxy {
            path,
            handover: Some(handover),
            cancel: None,
            task: None,
        })
    }

    /// The hand-over socket's path (for the helper's `Prep`).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the listening socket from the helper `helper_pid` (checked by its credentials),
    /// then serves it. Fails closed: no socket, no run.
    pub(crate) async fn start(&mut self, helper_pid: i32, served: Served) -> Result<(), ExecError> {
        let Some(handover) = self.handover.take() else {
            return Err(unavailable("egress: the proxy was started twice"));
        };
        let listener = tokio::time::timeout(HAND_OVER_TIMEOUT, receive(&handover, helper_pid))
            .await
            .map_err(|_| unavailable("egress: the sandbox did not hand its socket over in time"))?
            .map_err(|e| unavailable(format!("egress: {e}")))?;
        drop(handover);
        let _ = std::fs::remove_file(&self.path);
        let std_listener = std::net::TcpListener::from(listener);
        std_listener
            .set_nonblocking(true)
            .map_err(|e| unavailable(format!("egress: {e}")))?;
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .map_err(|e| unavailable(format!("egress: {e}")))?;
        let (tx, rx) = watch::channel(());
        self.cancel = Some(tx);
        self.task = Some(tokio::spawn(serve(listener, Arc::new(served), rx)));
        Ok(())
    }

    /// Stops accepting and lets the open connections (already cut off: the sandbox is gone)
    /// write their records; the ones still open after [`FINISH_GRACE`] are dropped, and this
    /// returns once they are.
    pub(crate) async fn finish(mut self) {
        self.cancel.take();
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(FINISH_GRACE * 2, &mut task)
                .await
                .is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cancel.take();
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accepts the helper's connection and receives the listening socket it sends.
async fn receive(handover: &UnixListener, helper_pid: i32) -> Result<OwnedFd, String> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let (conn, _) = handover
        .accept()
        .await
        .map_err(|e| format!("accepting the sandbox's hand-over: {e}"))?;
    let peer = rustix::net::sockopt::socket_peercred(&conn)
        .map_err(|e| format!("the hand-over's credentials: {e}"))?;
    if peer.pid.as_raw_nonzero().get() != helper_pid {
        return Err("the hand-over came from another process than the run's helper".into());
    }
    loop {
        conn.readable()
            .await
            .map_err(|e| format!("reading the hand-over: {e}"))?;
        let mut byte = [0u8; 1];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = conn.try_io(tokio::io::Interest::READABLE, || {
            let mut iov = [std::io::IoSliceMut::new(&mut byte)];
            rustix::net::recvmsg(
                &conn,
                &mut iov,
                &mut control,
                RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)
        });
        match got {
            Ok(msg) if msg.bytes == 1 => {}
            Ok(_) => return Err("the sandbox closed its hand-over without a socket".into()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(format!("reading the hand-over: {e}")),
        }
        if byte[0] != HELLO {
            return Err("the hand-over sent an unexpected message".into());
        }
        let mut fds: Vec<OwnedFd> = Vec::new();
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = msg {
                fds.extend(rights);
            }
        }
        let mut fds = fds.into_iter();
        return match (fds.next(), fds.next()) {
            (Some(fd), None) => check_listener(fd),
            _ => Err("the hand-over did not carry exactly one socket".into()),
        };
    }
}

/// The socket must be a listening TCP socket on the sandbox's `127.0.0.1:PROXY_PORT`.
fn check_listener(fd: OwnedFd) -> Result<OwnedFd, String> {
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
    let addr = rustix::net::getsockname(&fd)
        .ok()
        .and_then(|a| std::net::SocketAddr::try_from(a).ok());
    let want = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT));
    if !listening || addr != Some(want) {
        return Err("the hand-over carried a socket that is not the sandbox's listener".into());
    }
    Ok(fd)
}

async fn serve(
    listener: tokio::net::TcpListener,
    served: Arc<Served>,
    cancel: watch::Receiver<()>,
) {
    let slots = Arc::new(Semaphore::new(match &*served {
        Served::Egress(_) | Served::Both(..) => MAX_CONNECTIONS,
        Served::Corral(_) => MAX_LINK_CONNECTIONS,
    }));
    // With both on one socket, the link's connections have their own, smaller, limit.
    let link_slots = Arc::new(Semaphore::new(MAX_LINK_CONNECTIONS));
    let mut conns = tokio::task::JoinSet::new();
    let mut stop = cancel.clone();
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => p,
            _ = stop.changed() => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => break,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        let served = Arc::clone(&served);
        let link_slots = Arc::clone(&link_slots);
        let cancel = cancel.clone();
        conns.spawn(async move {
            match &*served {
                Served::Egress(egress) => {
                    let record = handle(stream, &egress.allow, cancel).await;
                    egress.log.record(record);
                }
                Served::Corral(link) => link.serve(stream).await,
                Served::Both(link, egress) => {
                    if for_link(&stream).await {
                        if let Ok(_slot) = link_slots.acquire().await {
                            link.serve(stream).await;
                        }
                    } else {
                        let record = handle(stream, &egress.allow, cancel).await;
                        egress.log.record(record);
                    }
                }
            }
            drop(permit);
        });
        // Reap the finished ones as we go.
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    // The sandbox is gone, so its connections are cut off: they get a moment to end (and write
    // their records), then are dropped with whatever they hold (a link's run world with them),
    // so that nothing of the run outlives it.
    let ended = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(FINISH_GRACE, ended).await.is_err() {
        conns.shutdown().await;
    }
}

/// Whether a connection of a link-and-egress socket is the link's: the target of its request
/// line is in origin form (`POST /v1/responses HTTP/1.1`), read without consuming a byte
/// (`peek`). A `CONNECT`, an absolute URI, anything else, and a connection that sends no
/// request line in time are the egress proxy's, which checks (or refuses) them and records them.
async fn for_link(stream: &TcpStream) -> bool {
    // A method (at most 16 bytes), a space, and the target's first byte.
    let mut buf = [0u8; 18];
    let deadline = tokio::time::Instant::now() + PEEK_TIMEOUT;
    let mut wait = Duration::from_millis(1);
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return false,
        };
        let seen = &buf[..n];
        if let Some(sp) = seen.iter().position(|&b| b == b' ')
            && sp + 1 < n
        {
            return seen[sp + 1] == b'/' && !seen[..sp].eq_ignore_ascii_case(b"CONNECT");
        }
        if n == buf.len() {
            return false;
        }
        // Only part of the request line is here, and `peek` would return it again at once:
        // wait, longer each time (a program trickling its bytes costs the parent little).
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(200));
    }
}

/// A request head as far as the proxy needs it.
struct Head {
    connect: bool,
    host: String,
    port: u16,
    /// For plain HTTP: the head to forward (origin form, `Connection: close`).
    forward: Vec<u8>,
}

/// One refused or failed connection's answer.
struct Refused {
    status: u16,
    reason: String,
}

fn record(host: &str, port: u16) -> EgressRecord {
    let mut host: String = host
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    host.make_ascii_lowercase();
    EgressRecord {
        host,
        port,
        addr: None,
        allowed: false,
        reason: None,
        bytes_up: 0,
        bytes_down: 0,
    }
}

async fn handle(
    mut client: TcpStream,
    allow: &EgressAllowList,
    mut cancel: watch::Receiver<()>,
) -> EgressRecord {
    let set_up = async {
        let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
            Ok(Ok(h)) => h,
            Ok(Err(why)) => {
                return Err((
                    record("", 0),
                    Refused {
                        status: 400,
                        reason: why,
                    },
                ));
            }
            Err(_) => {
                return Err((
                    record("", 0),
                    Refused {
                        status: 408,
                        reason: "the request head did not arrive in time".into(),
                    },
                ));
            }
        };
        let head = match parse_head(&head) {
            Ok(h) => h,
            Err(why) => {
                return Err((
                    record("", 0),
                    Refused {
                        status: 403,
                        reason: why,
                    },
                ));
            }
        };
        let mut rec = record(&head.host, head.port);
        match connect(allow, &head.host, head.port).await {
            Ok((upstream, addr)) => {
                rec.addr = Some(addr.ip());
                rec.allowed = true;
                Ok((head, rest, upstream, rec))
            }
            Err((addr, refused)) => {
                rec.addr = addr;
                Err((rec, refused))
            }
        }
    };
    let outcome = tokio::select! {
        o = set_up => o,
        _ = cancel.changed() => {
            let mut rec = record("", 0);
            rec.reason = Some("the run ended before the request was complete".into());
            return rec;
        }
    };
    let (head, rest, mut upstream, mut rec) = match outcome {
        Ok(v) => v,
        Err((mut rec, refused)) => {
            let _ = refuse(&mut client, &rec, &refused).await;
            rec.reason = Some(refused.reason);
            return rec;
        }
    };
    let first = if head.connect {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            rec.reason = Some("the program went away".into());
            return rec;
        }
        rest
    } else {
        let mut first = head.forward;
        first.extend_from_slice(&rest);
        first
    };
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    if upstream.write_all(&first).await.is_ok() {
        up.fetch_add(first.len() as u64, Ordering::Relaxed);
        let (cr, cw) = client.split();
        let (ur, uw) = upstream.split();
        tokio::select! {
            _ = async { tokio::join!(pump(cr, uw, &up), pump(ur, cw, &down)) } => {}
            _ = cancel.changed() => {}
        }
    }
    rec.bytes_up = up.load(Ordering::Relaxed);
    rec.bytes_down = down.load(Ordering::Relaxed);
    rec
}

/// Copies until end of file or an error, counting; then shuts the writing side down.
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(mut r: R, mut w: W, n: &AtomicU64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let k = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => k,
        };
        let Some(chunk) = buf.get(..k) else { break };
        if w.write_all(chunk).await.is_err() {
            break;
        }
        n.fetch_add(k as u64, Ordering::Relaxed);
    }
    let _ = w.shutdown().await;
}

/// Reads up to the end of the head (`\r\n\r\n`); returns the head and what followed it.
async fn read_head(client: &mut TcpStream) -> Result<(Vec<u8>, Vec<u8>), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(format!("the request head is longer than {MAX_HEAD} bytes"));
        }
        match client.read(&mut chunk).await {
            Ok(0) => return Err("the connection closed before a request head".into()),
            Ok(k) => buf.extend_from_slice(chunk.get(..k).unwrap_or_default()),
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
}

/// `host:port` (IPv6 in brackets) into its parts.
fn split_authority(auth: &str, default_port: Option<u16>) -> Result<(String, u16), String> {
    if auth.contains('@') {
        return Err("credentials in the proxy request are not accepted".into());
    }
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{auth}` is not a valid host"))?;
        (h.to_owned(), after.strip_prefix(':'))
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (auth.to_owned(), None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => p.parse::<u16>().ok().filter(|p| *p > 0),
        (None, d) => d,
    }
    .ok_or_else(|| format!("`{auth}` has no valid port"))?;
    if host.is_empty() {
        return Err("the request names no host".into());
    }
    Ok((host, port))
}

fn parse_head(head: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not text".to_owned())?;
    // Lines end in CRLF and nothing else: a bare CR or LF would let a header (or a second
    // request) past this parse that the server behind reads.
    let bytes = text.as_bytes();
    let bare = bytes.iter().enumerate().any(|(i, b)| match b {
        b'\r' => bytes.get(i + 1) != Some(&b'\n'),
        b'\n' => i == 0 || bytes.get(i - 1) != Some(&b'\r'),
        _ => false,
    });
    if bare {
        return Err("the request head has a line that does not end in CRLF".into());
    }
    let mut lines = text.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is malformed".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x proxy requests are served".into());
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_authority(target, None)?;
        return Ok(Head {
            connect: true,
            host,
            port,
            forward: Vec::new(),
        });
    }
    let Some(after) = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .and_then(|_| target.get(7..))
    else {
        return Err(
            "the proxy takes `CONNECT host:port` or a request with an absolute `http://` URI"
                .into(),
        );
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (auth, path) = after.split_at(end);
    let (host, port) = split_authority(auth, Some(80))?;
    let path = match path.split('#').next().unwrap_or_default() {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    // The `Host` is the authority that was checked, whatever the program wrote: another one
    // would reach another site served at the allowed address (virtual-host fronting).
    let mut forward = format!("{method} {path} {version}\r\nHost: {auth}\r\n").into_bytes();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if !token(method) {
        return Err("the request's method is not a token".into());
    }
    for line in lines.filter(|l| !l.is_empty()) {
        // A header is `name: value` with a token name: no folded line, no space before `:`.
        let Some((name, _)) = line.split_once(':').filter(|(n, _)| token(n)) else {
            return Err("a header line is not `name: value`".into());
        };
        let hop = [
            "host",
            "proxy-connection",
            "proxy-authorization",
            "connection",
            "keep-alive",
        ]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h));
        if !hop {
            forward.extend_from_slice(line.as_bytes());
            forward.extend_from_slice(b"\r\n");
        }
    }
    forward.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Head {
        connect: false,
        host,
        port,
        forward,
    })
}

/// Checks, resolves once, checks the addresses, connects to the checked one.
async fn connect(
    allow: &EgressAllowList,
    host: &str,
    port: u16,
) -> Result<(TcpStream, SocketAddr), (Option<IpAddr>, Refused)> {
    let denied = |reason: String| Refused {
        status: 403,
        reason,
    };
    let entry = allow.admit(host, port).map_err(|r| {
        (
            None,
            denied(format!("{}:{port} is refused: {r}", display_host(host))),
        )
    })?;
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port))).await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => {
                    return Err((
                        None,
                        Refused {
                            status: 502,
                            reason: format!("cannot resolve `{}`: {e}", display_host(host)),
                        },
                    ));
                }
                Err(_) => {
                    return Err((
                        None,
                        Refused {
                            status: 504,
                            reason: format!("resolving `{}` timed out", display_host(host)),
                        },
                    ));
                }
            }
        }
    };
    let Some(first) = addrs.first().copied() else {
        return Err((
            None,
            Refused {
                status: 502,
                reason: format!("`{}` resolves to no address", display_host(host)),
            },
        ));
    };
    // One internal address refuses the name: the program cannot pick which one it gets.
    for a in &addrs {
        if let Err(r @ EgressRefusal::Internal(_)) = EgressAllowList::address_ok(entry, a.ip()) {
            return Err((
                Some(a.ip()),
                denied(format!("{}:{port} is refused: {r}", display_host(host))),
            ));
        }
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(first)).await {
        Ok(Ok(s)) => Ok((s, first)),
        Ok(Err(e)) => Err((
            Some(first.ip()),
            Refused {
                status: 502,
                reason: format!("cannot connect to {first}: {e}"),
            },
        )),
        Err(_) => Err((
            Some(first.ip()),
            Refused {
                status: 504,
                reason: format!("connecting to {first} timed out"),
            },
        )),
    }
}

/// The host as safe to echo: printable ASCII only, at most 255 bytes.
fn display_host(host: &str) -> String {
    host.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect()
}

/// Answers a refusal: the code and reason in the status line and the body.
async fn refuse(client: &mut TcpStream, rec: &EgressRecord, r: &Refused) -> std::io::Result<()> {
    let code = if r.status >= 500 {
        corral_policy::codes::NET_CONNECT_FAILED
    } else {
        DENIED
    };
    let fix = if r.status < 500 && !rec.host.is_empty() {
        format!(
            "; fix: add `{}:{}` (or, for an internal address, the address itself) to the `network: {{allow: [...]}}` of the rule, custom op or server",
            rec.host, rec.port
        )
    } else {
        String::new()
    };
    let body = format!("corral: {code}: {}{fix}\n", r.reason);
    let phrase: String = format!("Forbidden ({code}: {})", r.reason)
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect();
    let phrase = if r.status < 500 {
        phrase
    } else {
        format!("Bad Gateway ({code})")
    };
    let head = format!(
        "HTTP/1.1 {} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Corral-Code: {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::parse_head;

    /// A head that would carry a second `Host` or a second request past the parse, to a server
    /// that reads bare LFs or folded lines, is refused; a plain one is forwarded with the
    /// checked `Host` only.
    #[test]
    fn a_head_smuggling_a_host_or_a_request_is_refused() {
        for bad in [
            "GET http://a.example/ HTTP/1.1\r\nX-A: 1\nHost: evil\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nX-A: 1\n\nGET / HTTP/1.1\nHost: evil\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nHost: x\r\n evil\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nHost : evil\r\n\r\n",
            "GET http://a.example/ HTTP/1.1\r\nX-A: 1\rHost: evil\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let ok =
            parse_head(b"GET http://a.example/x HTTP/1.1\r\nHOST: evil\r\nAccept: */*\r\n\r\n")
                .unwrap_or_else(|e| unreachable!("{e}"));
        let forwarded = String::from_utf8_lossy(&ok.forward).to_lowercase();
        assert_eq!(forwarded.matches("host:").count(), 1, "{forwarded}");
        assert!(forwarded.contains("host: a.example\r\n"), "{forwarded}");
    }
}
