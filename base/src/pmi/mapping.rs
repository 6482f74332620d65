//! `PMI_process_mapping`: which node each rank runs on (`reference/pmi.md` §4).
//!
//! Grammar (MPICH `mpl_rankmap.c`), whitespace allowed anywhere:
//!
//! ```text
//! mapping = "(" "vector" *( "," block ) ")"
//! block   = "(" start "," nnodes "," ppn ")"   ; nodes start.., ppn consecutive ranks each
//!         | num                                  ; == (num,1,1)        (MPICH >= 4.1)
//!         | "[" block *("," block) "]x" count    ; repeat group        (MPICH >= 4.1)
//! ```
//!
//! When the blocks run out before every rank has a node, decoding starts
//! again from the first block (the legacy cyclic form: Hydra writes
//! `(vector,(0,1,1))` for three ranks on one host).

/// A `PMI_process_mapping` string that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad PMI_process_mapping at byte {pos}: {reason}")]
pub struct MappingError {
    /// Byte offset where decoding failed.
    pub pos: usize,
    /// What was expected.
    pub reason: &'static str,
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    /// Node ids decoded so far (at most `limit`).
    out: Vec<u32>,
    limit: usize,
    depth: u32,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> MappingError {
        MappingError {
            pos: self.pos,
            reason,
        }
    }
    fn skip_ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }
    fn expect(&mut self, b: u8, reason: &'static str) -> Result<(), MappingError> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }
    fn number(&mut self) -> Result<u32, MappingError> {
        self.skip_ws();
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err("expected a number"));
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
            .ok_or(MappingError {
                pos: start,
                reason: "number out of range",
            })
    }
    fn emit(&mut self, node: u32, count: u32) {
        for _ in 0..count {
            if self.out.len() >= self.limit {
                return;
            }
            self.out.push(node);
        }
    }
    /// Parses one block, appending its expansion to `out`.
    fn block(&mut self) -> Result<(), MappingError> {
        match self.peek() {
            Some(b'(') => {
                self.pos += 1;
                let start = self.number()?;
                self.expect(b',', "expected ','")?;
                let nnodes = self.number()?;
                self.expect(b',', "expected ','")?;
                let ppn = self.number()?;
                self.expect(b')', "expected ')'")?;
                // `ppn == 0` assigns no rank: skip the node loop, which would
                // otherwise run up to 2^32 times for nothing (fuzz finding:
                // `(vector,(0,4000000000,0))` kept every rank busy for
                // seconds).
                for i in 0..if ppn == 0 { 0 } else { nnodes } {
                    if self.out.len() >= self.limit {
                        break;
                    }
                    let node = start.checked_add(i).ok_or(self.err("node id overflows"))?;
                    self.emit(node, ppn);
                }
                Ok(())
            }
            Some(b'[') => {
                self.pos += 1;
                self.depth += 1;
                if self.depth > 16 {
                    return Err(self.err("repeat groups nested too deeply"));
                }
                let group_start = self.out.len();
                self.block()?;
                while self.peek() == Some(b',') {
                    self.pos += 1;
                    self.block()?;
                }
                self.expect(b']', "expected ']'")?;
                self.expect(b'x', "expected 'x' after ']'")?;
                let count = self.number()?;
                self.depth -= 1;
                let group: Vec<u32> = self.out[group_start..].to_vec();
                if count == 0 {
                    self.out.truncate(group_start);
                    return Ok(());
                }
                if group.is_empty() {
                    return Ok(());
                }
                for _ in 1..count {
                    if self.out.len() >= self.limit {
                        break;
                    }
                    for &n in &group {
                        self.emit(n, 1);
                    }
                }
                Ok(())
            }
            Some(b) if b.is_ascii_digit() => {
                let node = self.number()?;
                self.emit(node, 1);
                Ok(())
            }
            _ => Err(self.err("expected '(', '[' or a number")),
        }
    }
}

/// Decodes `mapping` into the node id of every rank of a job of `size`
/// ranks (`result[rank]`), applying the cyclic wrap-around.
///
/// Errors on syntax errors and on a mapping that assigns no rank at all
/// (which includes the empty string, meaning "unknown").
pub fn parse_process_mapping(mapping: &str, size: u32) -> Result<Vec<u32>, MappingError> {
    let size = size as usize;
    let mut p = Parser {
        s: mapping.as_bytes(),
        pos: 0,
        out: Vec::new(),
        limit: size,
        depth: 0,
    };
    p.expect(b'(', "expected '('")?;
    p.skip_ws();
    if !p.s[p.pos..].starts_with(b"vector") {
        return Err(p.err("expected 'vector'"));
    }
    p.pos += "vector".len();
    while p.peek() == Some(b',') {
        p.pos += 1;
        p.block()?;
    }
    p.expect(b')', "expected ')'")?;
    if p.peek().is_some() {
        return Err(p.err("trailing characters"));
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    if p.out.is_empty() {
        return Err(MappingError {
            pos: 0,
            reason: "mapping assigns no rank",
        });
    }
    let period = p.out.len();
    let mut out = p.out;
    for r in period..size {
        let n = out[r % period];
        out.push(n);
    }
    Ok(out)
}

/// Encodes node ids per rank as a mapping string of `(start,nnodes,ppn)`
/// triples, the form every reader (Slurm, all MPICH versions) understands.
///
/// Consecutive ranks on one node become one block, consecutive blocks of
/// equal `ppn` on consecutive nodes merge; the shortest prefix that repeats
/// cyclically over the whole job is encoded (so a round-robin layout stays
/// short). `node_of` empty gives `(vector)`.
pub fn encode_process_mapping(node_of: &[u32]) -> String {
    let period = (1..=node_of.len())
        .find(|&p| {
            node_of.len().is_multiple_of(p)
                && (p..node_of.len()).all(|i| node_of[i] == node_of[i - p])
        })
        .unwrap_or(node_of.len());
    let prefix = &node_of[..period];
    // Runs of equal node id: (node, count).
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &n in prefix {
        match runs.last_mut() {
            Some((node, c)) if *node == n => *c += 1,
            _ => runs.push((n, 1)),
        }
    }
    // Merge runs into (start, nnodes, ppn) triples.
    let mut blocks: Vec<(u32, u32, u32)> = Vec::new();
    for (node, c) in runs {
        match blocks.last_mut() {
            Some((s, nn, ppn)) if *ppn == c && s.checked_add(*nn) == Some(node) => *nn += 1,
            _ => blocks.push((node, 1, c)),
        }
    }
    let mut s = String::from("(vector");
    for (a, b, c) in blocks {
        s.push_str(&format!(",({a},{b},{c})"));
    }
    s.push(')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_and_documented_examples() {
        assert_eq!(
            parse_process_mapping("(vector,(0,1,1))", 3).unwrap(),
            vec![0, 0, 0]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,1))", 4).unwrap(),
            vec![0, 1, 0, 1]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,1,1),(1,1,2))", 5).unwrap(),
            vec![0, 1, 1, 0, 1]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,3,4))", 12).unwrap(),
            vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
        );
        assert_eq!(
            parse_process_mapping("(vector,[(0,3,1)]x4)", 12).unwrap(),
            vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]
        );
        assert_eq!(
            parse_process_mapping(" ( vector , 0 , 1 , [ 2 , 3 ] x 2 ) ", 6).unwrap(),
            vec![0, 1, 2, 3, 2, 3]
        );
        // Fewer ranks than the mapping describes: truncated.
        assert_eq!(
            parse_process_mapping("(vector,(0,3,4))", 2).unwrap(),
            vec![0, 0]
        );
    }

    #[test]
    fn malformed_mappings_are_errors() {
        for bad in [
            "",
            "(vector)",
            "(vector,(0,0,1))",
            "vector,(0,1,1)",
            "(vector,(0,1))",
            "(vector,(0,1,1)",
            "(vector,(0,1,1))x",
            "(vector,(a,1,1))",
            "(vector,[(0,1,1)]4)",
            "(vector,(99999999999,1,1))",
            "(vector,(4294967295,2,1))",
        ] {
            assert!(parse_process_mapping(bad, 4).is_err(), "{bad:?} accepted");
        }
        // Deep nesting is refused, not a stack overflow.
        let deep = format!("(vector,{}0{})", "[".repeat(1000), "]x1".repeat(1000));
        assert!(parse_process_mapping(&deep, 4).is_err());
        // Blocks of zero processes per node cost nothing, whatever their
        // node count (fuzz finding: 2^32 empty iterations).
        let t0 = std::time::Instant::now();
        assert_eq!(
            parse_process_mapping("(vector,(0,4000000000,0),(0,1,1))", 3).unwrap(),
            vec![0, 0, 0]
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        // Huge repeat counts stay bounded by the job size.
        assert_eq!(
            parse_process_mapping("(vector,[(0,4000000000,4000000000)]x4000000000)", 3).unwrap(),
            vec![0, 0, 0]
        );
    }

    #[test]
    fn encode_roundtrips() {
        let layouts: Vec<Vec<u32>> = vec![
            vec![0, 0, 0],
            vec![0, 1, 0, 1],
            vec![0, 0, 1, 1, 2, 2],
            vec![0, 1, 1, 0, 1],
            vec![3, 3, 0, 7, 7, 7],
            vec![0],
        ];
        for l in layouts {
            let s = encode_process_mapping(&l);
            assert_eq!(parse_process_mapping(&s, l.len() as u32).unwrap(), l, "{s}");
        }
        assert_eq!(encode_process_mapping(&[0, 0, 0, 0]), "(vector,(0,1,1))");
        assert_eq!(encode_process_mapping(&[0, 0, 1, 1]), "(vector,(0,2,2))");
        assert_eq!(encode_process_mapping(&[0, 1, 0, 1]), "(vector,(0,2,1))");
    }
}
