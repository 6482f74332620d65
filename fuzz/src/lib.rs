//! Shared pieces of tmpi's fuzz targets (see `docs/fuzzing.md`).
//!
//! Two parsers are compiled into this crate from their source files instead
//! of being used through their crates:
//!
//! * the PMI server's protocol core (`run/src/pmi_server/core.rs`): it is
//!   `pub(crate)` in `tmpi-run` (the public server needs sockets and a
//!   thread); compiled here it can be fed byte streams directly, exactly as
//!   the I/O shell does, deterministically and fast;
//! * the pml wire headers (`pml/src/hdr.rs`): self-contained by design ("so
//!   it can be fuzzed"); including the file avoids building the whole pml
//!   stack (btl-sm, tm-engine, ...) with sanitizer instrumentation.
//!
//! Both files are the production sources, not copies: a change to them is
//! fuzzed by the next run.

use std::fmt::Write as _;

// `core.rs` refers to these as `super::{PmiEvent, ServerConfig}`.
pub use tmpi_run::pmi_server::{PmiEvent, ServerConfig};

#[allow(dead_code, clippy::all)]
#[path = "../../run/src/pmi_server/core.rs"]
mod server_core;

/// The pml's wire headers, compiled from `pml/src/hdr.rs`.
#[allow(dead_code, clippy::all)]
#[path = "../../pml/src/hdr.rs"]
pub mod pml_hdr;

/// The shared-memory structures of btl-sm (fast-box records, fragment
/// headers).
pub use tmpi_btl_sm::shm as sm_shm;

/// 64-byte aligned, zeroed memory standing in for a mapped segment.
pub struct AlignedMem {
    lines: Vec<Line>,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl AlignedMem {
    /// At least `bytes` zeroed bytes.
    pub fn new(bytes: usize) -> Self {
        AlignedMem {
            lines: vec![Line([0; 64]); bytes.div_ceil(64)],
        }
    }
    /// Start of the memory (64-byte aligned).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.lines.len() * 64
    }
    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.len();
        // SAFETY: `lines` is `n` initialised bytes, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), n) }
    }
}

/// Largest job size the server harness uses.
pub const SERVER_MAX_RANKS: u32 = 4;

/// The PMI server's protocol core for one job, driven like the I/O shell
/// drives it (bytes and end-of-file per rank).
pub struct Server {
    core: server_core::Core,
}

impl Server {
    /// A server for `cfg` (the launcher validates `cfg` before; use a valid
    /// one).
    pub fn new(cfg: &ServerConfig) -> Self {
        Server {
            core: server_core::Core::new(cfg),
        }
    }
    /// Bytes arrived from `rank`.
    pub fn on_data(&mut self, rank: u32, data: &[u8]) {
        self.core.on_data(rank, data);
    }
    /// End of file on `rank`'s connection.
    pub fn on_eof(&mut self, rank: u32) {
        self.core.on_eof(rank);
    }
    /// Number of connections.
    pub fn ranks(&self) -> usize {
        self.core.conns.len()
    }
    /// Takes the reply bytes queued for `rank` (what the shell would write).
    pub fn take_output(&mut self, rank: u32) -> Vec<u8> {
        std::mem::take(&mut self.core.conns[rank as usize].outbuf)
    }
    /// Reply bytes queued for `rank`, not taken.
    pub fn output_len(&self, rank: u32) -> usize {
        self.core.conns[rank as usize].outbuf.len()
    }
    /// Whether the core asked the shell to close `rank`'s connection.
    pub fn closed(&self, rank: u32) -> bool {
        self.core.conns[rank as usize].closed
    }
    /// Takes the queued events.
    pub fn take_events(&mut self) -> Vec<PmiEvent> {
        std::mem::take(&mut self.core.events)
    }
}

/// A small deterministic reader over fuzz input: the targets carve
/// decisions (sizes, choices) and byte strings out of it.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Wraps `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }
    /// Bytes not consumed yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data
    }
    /// Whether everything was consumed.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Next byte (0 when exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    /// Next little-endian u32 (zero-padded when exhausted).
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    /// Next little-endian u64 (zero-padded when exhausted).
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
    /// Bytes up to (not including) the next `sep`, which is consumed; the
    /// whole rest when there is none.
    pub fn until(&mut self, sep: u8) -> &'a [u8] {
        match self.data.iter().position(|&b| b == sep) {
            Some(i) => {
                let (a, b) = self.data.split_at(i);
                self.data = &b[1..];
                a
            }
            None => self.take(self.data.len()),
        }
    }
    /// Like [`Input::until`], decoded as UTF-8 lossily.
    pub fn text_until(&mut self, sep: u8) -> String {
        String::from_utf8_lossy(self.until(sep)).into_owned()
    }
}

/// Checks that `part` lies inside `whole` (a parser returned a sub-slice of
/// its input, not bytes beyond it).
pub fn assert_within(whole: &[u8], part: &[u8]) {
    let (w0, w1) = (
        whole.as_ptr() as usize,
        whole.as_ptr() as usize + whole.len(),
    );
    let (p0, p1) = (part.as_ptr() as usize, part.as_ptr() as usize + part.len());
    assert!(
        part.is_empty() || (w0 <= p0 && p1 <= w1),
        "slice {p0:#x}..{p1:#x} outside the input {w0:#x}..{w1:#x}"
    );
}

/// Renders bytes for assertion messages.
pub fn show(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b.iter().take(256) {
        if (0x20..0x7f).contains(&c) {
            s.push(c as char);
        } else {
            let _ = write!(s, "\\x{c:02x}");
        }
    }
    if b.len() > 256 {
        s.push_str("...");
    }
    s
}
