//! The sandbox's end of the egress proxy, run by the helper: it is inside the sandbox's network
//! namespace but outside its pid namespace, so nothing the target runs can see or signal it.
//!
//! Before `unshare` the helper connects to the parent's hand-over socket (a Unix socket path in
//! corral's private runtime directory, still visible then). After `unshare` and the init's
//! `fork`, and before the spec (so before the target exists), it brings `lo` up, listens on
//! `127.0.0.1:`[`PROXY_PORT`] and sends that listening socket to the parent (`SCM_RIGHTS`),
//! keeping no copy. From then on the parent's proxy accepts every TCP connection the program
//! makes to the proxy address: no process inside the sandbox relays anything, and the socket
//! the program talks to is the only thing in its network namespace that leads out.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketType, sockopt,
};

use super::mounts::{self, StepError};

/// The proxy's port on the sandbox's `127.0.0.1` (the namespace is fresh: nothing else has it).
pub const PROXY_PORT: u16 = 3128;

/// The one byte sent with the listening socket.
pub(crate) const HELLO: u8 = b'L';

/// Connects to the parent's hand-over socket; before `unshare`, while the path is visible.
pub(crate) fn connect(path: &Path) -> Result<UnixStream, StepError> {
    UnixStream::connect(path).map_err(|e| {
        StepError::unavailable(
            format!("connect to the egress proxy at {}", path.display()),
            e,
        )
    })
}

/// In the sandbox's network namespace: `lo` up, the listening socket made and sent over
/// `conn`, and dropped here.
pub(crate) fn hand_over(conn: UnixStream) -> Result<(), StepError> {
    mounts::loopback_up().map_err(|e| StepError::unavailable("bring lo up for egress", e))?;
    let listener = listen().map_err(|e| StepError::unavailable("egress listening socket", e))?;
    send(&conn, &listener).map_err(|e| StepError::unavailable("hand the egress socket over", e))
}

fn listen() -> rustix::io::Result<OwnedFd> {
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&sock, true)?;
    let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, PROXY_PORT);
    rustix::net::bind(&sock, &addr)?;
    rustix::net::listen(&sock, 128)?;
    Ok(sock)
}

fn send(conn: &UnixStream, listener: &OwnedFd) -> rustix::io::Result<()> {
    let fds = [listener.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    loop {
        match rustix::net::sendmsg(
            conn,
            &[IoSlice::new(&[HELLO])],
            &mut control,
            SendFlags::empty(),
        ) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(rustix::io::Errno::IO),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}
