//! PMI client (PMI-1 "simple" and PMI-2 wire protocols) and the modex on it.
//!
//! See `reference/pmi.md` for the protocols; [`wire`] holds the codecs shared
//! with the server in `tmpi-run`, [`mapping`] the `PMI_process_mapping`
//! decoder.

pub mod mapping;
pub mod wire;

pub use mapping::{encode_process_mapping, parse_process_mapping, MappingError};
pub use wire::{
    format_v1_line, format_v2_frame, parse_v1_line, parse_v2_frame, Message, WireError,
};
