//! stubs
