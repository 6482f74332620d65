//! Line-buffered forwarding of one rank's output stream.
//!
//! Bytes from a rank's pipe are cut into lines; each complete line is
//! written in one piece, so lines of different ranks never mix. With
//! tagging, every line gets the prefix `[1,<rank>]<stdout>:` (or
//! `<stderr>:`), the format of Open MPI's `--tag-output`.
//!
//! Choices: a line longer than [`MAX_LINE`] bytes is forwarded in pieces of
//! that size (each with its own tag) rather than buffered without bound; a
//! last line without a newline is forwarded at end of stream, and gets a
//! newline appended only when tagging (so that tagged output stays one
//! record per line).

use std::io::Write;

/// Longest partial line kept before it is forwarded anyway.
pub const MAX_LINE: usize = 64 * 1024;

/// Which of the rank's streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Cuts one stream of one rank into lines.
#[derive(Debug)]
pub struct LineForwarder {
    prefix: Option<Vec<u8>>,
    pending: Vec<u8>,
}

impl LineForwarder {
    /// A forwarder for `rank`'s `stream`, tagging lines when `tag`.
    pub fn new(rank: u32, stream: Stream, tag: bool) -> Self {
        let prefix = tag.then(|| {
            let name = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            };
            format!("[1,{rank}]<{name}>:").into_bytes()
        });
        LineForwarder {
            prefix,
            pending: Vec::new(),
        }
    }

    fn emit(&self, out: &mut Vec<u8>, line: &[u8], add_newline: bool) {
        if let Some(p) = &self.prefix {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(line);
        if add_newline {
            out.push(b'\n');
        }
    }

    /// Takes `data` and returns the bytes to write now (complete lines).
    pub fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = data;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = rest.split_at(i + 1);
            if self.pending.is_empty() {
                self.emit(&mut out, line, false);
            } else {
                let mut full = std::mem::take(&mut self.pending);
                full.extend_from_slice(line);
                self.emit(&mut out, &full, false);
            }
            rest = tail;
        }
        self.pending.extend_from_slice(rest);
        while self.pending.len() >= MAX_LINE {
            let piece: Vec<u8> = self.pending.drain(..MAX_LINE).collect();
            let tagged = self.prefix.is_some();
            self.emit(&mut out, &piece, tagged);
        }
        out
    }

    /// End of stream: returns what is left (see the module docs).
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            let tagged = self.prefix.is_some();
            self.emit(&mut out, &rest, tagged);
        }
        out
    }
}

/// Writes `bytes` to our own stdout or stderr and flushes. Errors (a closed
/// terminal or pipe) are reported once per stream and otherwise ignored:
/// losing the output must not change how the job ends.
pub fn write_out(stream: Stream, bytes: &[u8], warned: &mut bool) {
    if bytes.is_empty() {
        return;
    }
    let r = match stream {
        Stream::Stdout => {
            let mut o = std::io::stdout().lock();
            o.write_all(bytes).and_then(|_| o.flush())
        }
        Stream::Stderr => {
            let mut o = std::io::stderr().lock();
            o.write_all(bytes).and_then(|_| o.flush())
        }
    };
    if let Err(e) = r {
        if !*warned {
            *warned = true;
            tracing::warn!(target: "tmpirun", "cannot forward rank output to {}: {e}", match stream { Stream::Stdout => "standard output", Stream::Stderr => "standard error" });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untagged_lines_pass_through_whole() {
        let mut f = LineForwarder::new(0, Stream::Stdout, false);
        assert_eq!(f.feed(b"ab"), b"");
        assert_eq!(f.feed(b"c\nde\nf"), b"abc\nde\n");
        assert_eq!(f.finish(), b"f");
        assert_eq!(f.finish(), b"");
    }

    #[test]
    fn tagged_lines_get_prefix_and_final_newline() {
        let mut f = LineForwarder::new(2, Stream::Stderr, true);
        assert_eq!(f.feed(b"x\ny"), b"[1,2]<stderr>:x\n");
        assert_eq!(f.finish(), b"[1,2]<stderr>:y\n");
        let mut g = LineForwarder::new(11, Stream::Stdout, true);
        assert_eq!(g.feed(b"\n"), b"[1,11]<stdout>:\n");
    }

    #[test]
    fn long_lines_are_cut() {
        let mut f = LineForwarder::new(0, Stream::Stdout, true);
        let data = vec![b'a'; MAX_LINE + 10];
        let out = f.feed(&data);
        assert_eq!(out.len(), "[1,0]<stdout>:".len() + MAX_LINE + 1);
        let rest = f.finish();
        assert_eq!(rest.len(), "[1,0]<stdout>:".len() + 10 + 1);
    }
}
