//! Opening client TCP sockets, bound to a chosen source address.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

use crate::error::ConnError;

/// Connects to `addr`, binding the local side to `source` (port chosen by the kernel) first.
///
/// Binding before connecting gives every source address its own ephemeral port range, which
/// is what lets one machine hold more than ~28,000 connections to one server address.
/// `IP_BIND_ADDRESS_NO_PORT` (Linux) defers the port choice to `connect`, where the kernel
/// only needs the 4-tuple to be unique: the bind is cheap (a plain `bind(ip:0)` searches for a
/// port no other socket holds, which costs O(sockets) and dominated kernel time at 30k
/// sockets) and a port can be reused towards different servers.
pub(crate) async fn dial(
    addr: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<TcpStream, ConnError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(ConnError::Connect)?;
    if let Some(ip) = source
        && ip.is_ipv4() == addr.is_ipv4()
    {
        if ip.is_ipv4() {
            // best effort: without it the bind still works, only slower
            let _ = nix::sys::socket::setsockopt(
                &socket,
                nix::sys::socket::sockopt::IpBindAddressNoPort,
                &true,
            );
        }
        socket
            .bind(SocketAddr::new(ip, 0))
            .map_err(ConnError::Connect)?;
    }
    socket.set_nodelay(true).map_err(ConnError::Connect)?;
    match tokio::time::timeout(timeout, socket.connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(ConnError::Connect(e)),
        Err(_) => Err(ConnError::ConnectTimeout),
    }
}
