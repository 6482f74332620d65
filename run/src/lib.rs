//! tmpi-run: the `tmpirun` launcher with its built-in PMI-1/PMI-2 server,
//! and `tmpi_info`.

pub mod launcher;
pub mod pmi_server;
pub mod session;
