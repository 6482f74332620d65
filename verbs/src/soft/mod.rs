//! The soft NIC (in progress).
pub mod tm;
