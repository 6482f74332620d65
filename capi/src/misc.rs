//! misc
