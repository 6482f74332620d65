//! Unit tests of the matching rules and the differential property test.

mod differential;
mod rules;
