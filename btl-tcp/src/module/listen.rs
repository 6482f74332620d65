//! The listening sockets: one per address of the selected interfaces, all
//! on one ephemeral port (the modex publishes one port), never the
//! wildcard address.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};

use tmpi_btl::BtlError;

use crate::ifaddr::Iface;

/// Attempts at finding a port free on every selected address.
const BIND_ATTEMPTS: usize = 16;

/// Binds every distinct address of `ifaces` on one ephemeral port
/// (non-blocking sockets); returns them with the port.
pub(super) fn bind_all(ifaces: &[Iface]) -> Result<(Vec<TcpListener>, u16), BtlError> {
    let mut addrs: Vec<Ipv4Addr> = Vec::new();
    for i in ifaces {
        if !addrs.contains(&i.addr) {
            addrs.push(i.addr);
        }
    }
    let Some((&first, rest)) = addrs.split_first() else {
        return Err(BtlError::Unavailable("no address to listen on".into()));
    };
    let mut last_err = None;
    for _ in 0..BIND_ATTEMPTS {
        let l0 = bind(first, 0)?;
        let port = l0
            .local_addr()
            .map_err(|e| BtlError::io("local_addr", e))?
            .port();
        let mut all = vec![l0];
        let mut clash = false;
        for &a in rest {
            match bind(a, port) {
                Ok(l) => all.push(l),
                Err(BtlError::Io { op, source })
                    if source.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    last_err = Some(BtlError::Io { op, source });
                    clash = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if !clash {
            return Ok((all, port));
        }
    }
    Err(last_err.unwrap_or_else(|| BtlError::Unavailable("no common free port".into())))
}

fn bind(ip: Ipv4Addr, port: u16) -> Result<TcpListener, BtlError> {
    let at = SocketAddr::V4(SocketAddrV4::new(ip, port));
    let l = TcpListener::bind(at)
        .map_err(|e| BtlError::io(format!("bind the tcp BTL listening socket to {at}"), e))?;
    l.set_nonblocking(true)
        .map_err(|e| BtlError::io("set_nonblocking", e))?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_the_given_address_only() {
        let lo = Iface {
            name: "lo".into(),
            addr: Ipv4Addr::LOCALHOST,
            prefix: 8,
            loopback: true,
        };
        let (ls, port) = bind_all(&[lo.clone(), lo]).unwrap();
        assert_eq!(ls.len(), 1, "duplicate addresses bound once");
        let at = ls[0].local_addr().unwrap();
        assert_eq!(at, SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        assert!(bind_all(&[]).is_err());
    }
}
