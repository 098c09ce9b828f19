//! One listening socket per loop thread on the same address, with `SO_REUSEPORT`: the kernel
//! spreads new connections over the threads, none of which accepts for another (uWebSockets'
//! and nginx's `reuseport`).

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// A non-blocking listener on `addr` that other threads can bind too.
pub(crate) fn reuseport_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    // The kernel caps it at net.core.somaxconn.
    socket.listen(4096)?;
    Ok(socket.into())
}
