//! Network interfaces: listing the IPv4 addresses of this host
//! (`getifaddrs`, the crate's only `unsafe`) and choosing among them with
//! `btl_tcp_if_include` / `btl_tcp_if_exclude`.

use std::net::Ipv4Addr;

/// One IPv4 address of an interface that is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Interface name (`eth0`).
    pub name: String,
    /// Address.
    pub addr: Ipv4Addr,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// Whether it is a loopback interface.
    pub loopback: bool,
}

/// The IPv4 addresses of every interface that is up.
pub fn list() -> std::io::Result<Vec<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`; on success we own
    // the list until freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        // SAFETY: ifa_addr is non-null and points to a sockaddr.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        if !up || family != libc::AF_INET {
            continue;
        }
        // SAFETY: family is AF_INET, so the sockaddr is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        let prefix = if ifa.ifa_netmask.is_null() {
            32
        } else {
            // SAFETY: the netmask of an AF_INET address is a sockaddr_in.
            let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
            u32::from_be(m.sin_addr.s_addr).count_ones() as u8
        };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push(Iface {
            name,
            addr,
            prefix,
            loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0 || addr.is_loopback(),
        });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// An entry of an include/exclude list: an interface name or a CIDR subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfSpec {
    /// Interface name.
    Name(String),
    /// Subnet `addr/prefix`.
    Subnet(Ipv4Addr, u8),
}

impl IfSpec {
    /// Parses `eth0` or `10.0.0.0/8`.
    pub fn parse(s: &str) -> Result<IfSpec, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty interface entry".into());
        }
        if let Some((a, p)) = s.split_once('/') {
            let addr: Ipv4Addr = a
                .parse()
                .map_err(|_| format!("{s:?}: not an IPv4 subnet"))?;
            let prefix: u8 = p
                .parse()
                .ok()
                .filter(|&p| p <= 32)
                .ok_or_else(|| format!("{s:?}: prefix must be 0..=32"))?;
            return Ok(IfSpec::Subnet(addr, prefix));
        }
        if s.len() > 15 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!("{s:?}: not an interface name"));
        }
        Ok(IfSpec::Name(s.to_string()))
    }

    /// Whether `iface` matches.
    pub fn matches(&self, iface: &Iface) -> bool {
        match self {
            IfSpec::Name(n) => *n == iface.name,
            IfSpec::Subnet(a, p) => same_subnet(*a, iface.addr, *p),
        }
    }
}

/// Whether `a` and `b` agree on their first `prefix` bits.
pub fn same_subnet(a: Ipv4Addr, b: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix.min(32)))
    };
    u32::from(a) & mask == u32::from(b) & mask
}

/// Applies the include/exclude lists (at most one of them may be set).
pub fn select(
    ifaces: Vec<Iface>,
    include: &[IfSpec],
    exclude: &[IfSpec],
) -> Result<Vec<Iface>, String> {
    if !include.is_empty() && !exclude.is_empty() {
        return Err("btl_tcp_if_include and btl_tcp_if_exclude are mutually exclusive".into());
    }
    Ok(ifaces
        .into_iter()
        .filter(|i| {
            if include.is_empty() {
                !exclude.iter().any(|s| s.matches(i))
            } else {
                include.iter().any(|s| s.matches(i))
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifc(name: &str, a: &str, p: u8) -> Iface {
        let addr: Ipv4Addr = a.parse().unwrap();
        Iface {
            name: name.into(),
            addr,
            prefix: p,
            loopback: addr.is_loopback(),
        }
    }

    #[test]
    fn lists_loopback() {
        let l = list().unwrap();
        assert!(
            l.iter()
                .any(|i| i.loopback && i.addr == Ipv4Addr::LOCALHOST),
            "{l:?}"
        );
    }

    #[test]
    fn include_exclude() {
        let all = vec![
            ifc("lo", "127.0.0.1", 8),
            ifc("eth0", "10.77.0.1", 24),
            ifc("eth1", "192.168.1.5", 24),
        ];
        let names = |v: Vec<Iface>| v.into_iter().map(|i| i.name).collect::<Vec<_>>();
        assert_eq!(names(select(all.clone(), &[], &[]).unwrap()).len(), 3);
        let inc = [IfSpec::parse("10.77.0.0/16").unwrap()];
        assert_eq!(names(select(all.clone(), &inc, &[]).unwrap()), ["eth0"]);
        let exc = [IfSpec::parse("lo").unwrap(), IfSpec::parse("eth1").unwrap()];
        assert_eq!(names(select(all.clone(), &[], &exc).unwrap()), ["eth0"]);
        assert!(select(all, &inc, &exc).is_err());
        for bad in [
            "",
            "10.0.0.0/33",
            "300.1.1.1/8",
            "a b",
            "averyveryverylongname",
        ] {
            assert!(IfSpec::parse(bad).is_err(), "{bad:?}");
        }
        assert!(same_subnet(
            "10.77.0.1".parse().unwrap(),
            "10.77.0.9".parse().unwrap(),
            24
        ));
        assert!(!same_subnet(
            "10.77.0.1".parse().unwrap(),
            "10.78.0.1".parse().unwrap(),
            16
        ));
        assert!(same_subnet(
            "1.2.3.4".parse().unwrap(),
            "5.6.7.8".parse().unwrap(),
            0
        ));
    }
}
