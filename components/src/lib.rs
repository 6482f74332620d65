//! tmpi-components: the BTL components this build links, in one place.
//!
//! Open MPI generates a list of its statically linked components per
//! framework at build time; this crate is that list for tmpi's byte
//! transfer layers. The pml sees BTLs only through the `tmpi-btl`
//! interface and is *given* this list when it starts
//! (`tmpi_pml::InitOptions::btls`), so it depends on no BTL crate; the
//! Rust facade and the C API start the pml with it, and `tmpi_info` lists
//! and probes the same components. Adding a BTL means one line here (and
//! its crate as a dependency), nothing in the pml.

use tmpi_base::component::Provider;
use tmpi_btl::BtlComponent;

/// The BTL components, in preference order (the `btl` selection parameter
/// picks among them; per peer the reachable module with the highest
/// exclusivity carries the traffic).
pub fn btls() -> Vec<&'static dyn BtlComponent> {
    vec![
        &tmpi_btl_self::SelfComponent,
        &tmpi_btl_sm::SmComponent,
        &tmpi_btl_openib::OpenibComponent,
        &tmpi_btl_tcp::TcpComponent,
    ]
}

/// The BTL crates' descriptor providers (component descriptors and MCA
/// parameters, for `tmpi_info`): one per component of [`btls`].
pub const BTL_PROVIDERS: &[Provider] = &[
    tmpi_btl_self::register,
    tmpi_btl_sm::register,
    tmpi_btl_tcp::register,
    tmpi_btl_openib::register,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_btl_has_a_descriptor_provider_of_the_same_name() {
        let reg = tmpi_base::mca::Registry::new(tmpi_base::mca::Sources::default());
        let mut comps = tmpi_base::component::ComponentRegistry::new();
        for p in BTL_PROVIDERS {
            p(&reg, &mut comps).unwrap();
        }
        let mut described: Vec<&str> = comps
            .components()
            .iter()
            .filter(|c| c.framework == "btl")
            .map(|c| c.name)
            .collect();
        let mut linked: Vec<&str> = btls().iter().map(|c| c.name()).collect();
        described.sort_unstable();
        linked.sort_unstable();
        assert_eq!(described, linked);
    }
}
