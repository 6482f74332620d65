//! PMI-1 and PMI-2 wire codecs, free of I/O.
//!
//! Both the client ([`super::PmiClient`]) and the server in `tmpi-run` use
//! these functions, so there is exactly one parser per framing. The parsers
//! never panic on any input (they are meant to be fuzzed) and are lenient
//! where real peers differ (field order, extra fields, padding of the PMI-2
//! length header; see `reference/pmi.md` §2.1, §3.2) and strict where
//! ambiguity would corrupt data (a token without `=`, invalid UTF-8, a
//! length header that is not a decimal number).
//!
//! Message model: a command name plus `key=value` fields in wire order.
//! Lookups return the *first* occurrence of a key.

use std::fmt;

/// Longest PMI-1 line, newline included, that every server accepts
/// (Slurm reads a command with one 1024-byte `read`).
pub const V1_MAX_LINE: usize = 1024;
/// Largest PMI-2 body length expressible in the 6-digit header.
pub const V2_MAX_BODY: usize = 999_999;
/// Size of the PMI-2 length header.
pub const V2_HEADER_LEN: usize = 6;
/// `kvsname_max` that Hydra and Slurm report (counts the C NUL).
pub const KVSNAME_MAX: usize = 256;
/// `keylen_max` that Hydra and Slurm report (counts the C NUL).
pub const KEYLEN_MAX: usize = 64;
/// `vallen_max` that Hydra and Slurm report (counts the C NUL): values may
/// have at most `VALLEN_MAX - 1` bytes.
pub const VALLEN_MAX: usize = 1024;

/// A malformed PMI message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The message holds no bytes (or only separators).
    #[error("empty PMI message")]
    Empty,
    /// The message is not valid UTF-8.
    #[error("PMI message is not valid UTF-8")]
    NotUtf8,
    /// No `cmd=` field (PMI-1: not the first token).
    #[error("PMI message has no cmd= field")]
    NoCommand,
    /// A token/pair without `=`.
    #[error("PMI field {token:?} has no '='")]
    MissingEquals {
        /// The offending token (truncated to 64 bytes).
        token: String,
    },
    /// A field with an empty key (`=value`).
    #[error("PMI field with empty key")]
    EmptyKey,
    /// The 6-byte PMI-2 length header is not a decimal number.
    #[error("bad PMI-2 length header {header:?}")]
    BadLength {
        /// The header bytes, lossily decoded.
        header: String,
    },
    /// The PMI-2 body is longer than the reader accepts.
    #[error("PMI-2 frame body of {len} bytes exceeds the limit of {max}")]
    FrameTooLong {
        /// Announced body length.
        len: usize,
        /// Limit of this reader.
        max: usize,
    },
    /// A PMI-1 line is longer than the reader accepts.
    #[error("PMI-1 line longer than {max} bytes")]
    LineTooLong {
        /// Limit of this reader.
        max: usize,
    },
    /// A key or value contains a byte that this framing cannot carry.
    #[error("PMI {what} {text:?} contains the forbidden character {ch:?}")]
    ForbiddenChar {
        /// `"key"`, `"value"` or `"command"`.
        what: &'static str,
        /// The offending text (truncated to 64 bytes).
        text: String,
        /// The forbidden character.
        ch: char,
    },
}

/// One PMI message (request or response) of either protocol version.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Command name (`get_maxes`, `kvs-put`, ...).
    pub cmd: String,
    /// The other fields, in wire order, without `cmd`.
    pub fields: Vec<(String, String)>,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cmd={}", self.cmd)?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

impl Message {
    /// A message with command `cmd` and no fields.
    pub fn new(cmd: impl Into<String>) -> Self {
        Message {
            cmd: cmd.into(),
            fields: Vec::new(),
        }
    }

    /// Builder: appends `key=value`.
    pub fn with(mut self, key: impl Into<String>, value: impl fmt::Display) -> Self {
        self.fields.push((key.into(), value.to_string()));
        self
    }

    /// Appends `key=value`.
    pub fn push(&mut self, key: impl Into<String>, value: impl fmt::Display) {
        self.fields.push((key.into(), value.to_string()));
    }

    /// Value of the first field named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The `rc` field: missing means success (0); a value that is not an
    /// integer is reported as `Err` with the raw text.
    pub fn rc(&self) -> Result<i32, String> {
        match self.get("rc") {
            None => Ok(0),
            Some(v) => v.trim().parse::<i32>().map_err(|_| v.to_string()),
        }
    }

    /// A PMI boolean field (`TRUE`/`FALSE`, compared ignoring case like
    /// Slurm). `None` when missing or not a boolean.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        if v.eq_ignore_ascii_case("TRUE") {
            Some(true)
        } else if v.eq_ignore_ascii_case("FALSE") {
            Some(false)
        } else {
            None
        }
    }
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

fn split_pair(token: &str) -> Result<(&str, &str), WireError> {
    let (k, v) = token
        .split_once('=')
        .ok_or_else(|| WireError::MissingEquals { token: clip(token) })?;
    if k.is_empty() {
        return Err(WireError::EmptyKey);
    }
    Ok((k, v))
}

/// Parses one PMI-1 line (`cmd=NAME key=value ...`, with or without the
/// trailing newline; a `\r` before it is ignored).
///
/// Tokens are separated by one or more spaces or tabs; each token is split at
/// its first `=` (so values may contain `=`). The first token must be `cmd=`
/// (or `mcmd=`, reported with `cmd` set to its value; the multi-line spawn
/// body is not parsed here). No escape sequences are interpreted
/// (`reference/pmi.md` §2.1).
pub fn parse_v1_line(line: &[u8]) -> Result<Message, WireError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
    let mut tokens = text.split([' ', '\t']).filter(|t| !t.is_empty());
    let first = tokens.next().ok_or(WireError::Empty)?;
    let (k, v) = split_pair(first).map_err(|_| WireError::NoCommand)?;
    if k != "cmd" && k != "mcmd" {
        return Err(WireError::NoCommand);
    }
    let mut msg = Message::new(v);
    for t in tokens {
        let (k, v) = split_pair(t)?;
        msg.fields.push((k.to_string(), v.to_string()));
    }
    Ok(msg)
}

fn check_text(what: &'static str, text: &str, forbidden: &[char]) -> Result<(), WireError> {
    if let Some(ch) = text
        .chars()
        .find(|c| forbidden.contains(c) || c.is_control())
    {
        return Err(WireError::ForbiddenChar {
            what,
            text: clip(text),
            ch,
        });
    }
    Ok(())
}

/// Formats `msg` as one PMI-1 line ending in `\n`.
///
/// Fails when a key or the command is empty or contains space, `=`, or a
/// control character, or when a value contains space or a control character
/// (PMI-1 has no working escaping, `reference/pmi.md` §2.1). The line length
/// is not checked here; see [`V1_MAX_LINE`].
pub fn format_v1_line(msg: &Message) -> Result<Vec<u8>, WireError> {
    if msg.cmd.is_empty() {
        return Err(WireError::NoCommand);
    }
    check_text("command", &msg.cmd, &[' ', '='])?;
    let mut out = String::with_capacity(64);
    out.push_str("cmd=");
    out.push_str(&msg.cmd);
    for (k, v) in &msg.fields {
        if k.is_empty() {
            return Err(WireError::EmptyKey);
        }
        check_text("key", k, &[' ', '='])?;
        check_text("value", v, &[' '])?;
        out.push(' ');
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out.push('\n');
    Ok(out.into_bytes())
}

/// Key of the abort message in the form [`encode_abort_text`] makes:
/// `tmpirun`'s PMI server reads it in preference to `message`/`msg`, other
/// servers ignore it.
pub const ABORT_TEXT_KEY: &str = "tmpi_message";

/// An abort message as one PMI-1 value: space, `%`, `;`, `=`, `\` and
/// control characters as `%XX` (their byte in hex), everything else as is;
/// cut at a character boundary so the result holds at most `max` bytes.
/// [`decode_abort_text`] restores the text. (PMI-1 values cannot contain
/// spaces, and no escape is understood by every server, see
/// `reference/pmi.md` §2.1; so this form travels in its own key next to
/// the plain `message`.)
pub fn encode_abort_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let enc = if c == ' ' || c == '%' || c == ';' || c == '=' || c == '\\' || c.is_control() {
            let mut b = [0u8; 4];
            c.encode_utf8(&mut b)
                .bytes()
                .map(|x| format!("%{x:02X}"))
                .collect::<String>()
        } else {
            c.to_string()
        };
        if out.len() + enc.len() > max {
            break;
        }
        out.push_str(&enc);
    }
    out
}

/// The text [`encode_abort_text`] encoded (a `%` not followed by two hex
/// digits stays as it is; invalid UTF-8 becomes U+FFFD).
pub fn decode_abort_text(enc: &str) -> String {
    let b = enc.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a PMI-2 body (`cmd=NAME;key=value;...;`) without its length header.
///
/// Pairs end in `;` (a missing final `;` is tolerated); empty pairs (`;;`) are
/// skipped, no escapes are interpreted (`reference/pmi.md` §3.2). The `cmd`
/// field may appear anywhere; it is required.
pub fn parse_v2_body(body: &[u8]) -> Result<Message, WireError> {
    let text = std::str::from_utf8(body).map_err(|_| WireError::NotUtf8)?;
    let mut cmd = None;
    let mut fields = Vec::new();
    let mut any = false;
    for pair in text.split(';').filter(|p| !p.is_empty()) {
        any = true;
        let (k, v) = split_pair(pair)?;
        if k == "cmd" && cmd.is_none() {
            cmd = Some(v.to_string());
        } else {
            fields.push((k.to_string(), v.to_string()));
        }
    }
    if !any {
        return Err(WireError::Empty);
    }
    let cmd = cmd.filter(|c| !c.is_empty()).ok_or(WireError::NoCommand)?;
    Ok(Message { cmd, fields })
}

/// Reads the 6-byte PMI-2 length header: decimal digits padded with spaces
/// on either side (Hydra `%6u`, Slurm `%-6d`) or with leading zeros.
pub fn parse_v2_header(header: &[u8; V2_HEADER_LEN]) -> Result<usize, WireError> {
    let bad = || WireError::BadLength {
        header: String::from_utf8_lossy(header).into_owned(),
    };
    let text = std::str::from_utf8(header).map_err(|_| bad())?;
    let digits = text.trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    digits.parse::<usize>().map_err(|_| bad())
}

/// Parses one PMI-2 frame from the start of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold the whole frame, and
/// `Ok(Some((message, consumed)))` otherwise. Bodies longer than `max_body`
/// are refused before they are buffered (a reader's protection against
/// hostile peers); pass [`V2_MAX_BODY`] to accept every legal frame.
pub fn parse_v2_frame(buf: &[u8], max_body: usize) -> Result<Option<(Message, usize)>, WireError> {
    let Some(header) = buf.get(..V2_HEADER_LEN) else {
        return Ok(None);
    };
    let mut h = [0u8; V2_HEADER_LEN];
    h.copy_from_slice(header);
    let len = parse_v2_header(&h)?;
    if len > max_body {
        return Err(WireError::FrameTooLong { len, max: max_body });
    }
    let Some(body) = buf.get(V2_HEADER_LEN..V2_HEADER_LEN + len) else {
        return Ok(None);
    };
    let msg = parse_v2_body(body)?;
    Ok(Some((msg, V2_HEADER_LEN + len)))
}

/// Formats `msg` as one PMI-2 frame: a left-aligned 6-byte decimal length
/// (Slurm style, accepted by every known reader) and the body
/// `cmd=NAME;key=value;...;`.
///
/// Fails when a key or the command is empty or contains `;`, `=` or a control
/// character, when a value contains `;` or a control character (PMI-2 has
/// no working escaping), or when the body exceeds [`V2_MAX_BODY`].
pub fn format_v2_frame(msg: &Message) -> Result<Vec<u8>, WireError> {
    if msg.cmd.is_empty() {
        return Err(WireError::NoCommand);
    }
    check_text("command", &msg.cmd, &[';', '='])?;
    let mut body = String::with_capacity(64);
    body.push_str("cmd=");
    body.push_str(&msg.cmd);
    body.push(';');
    for (k, v) in &msg.fields {
        if k.is_empty() {
            return Err(WireError::EmptyKey);
        }
        check_text("key", k, &[';', '='])?;
        check_text("value", v, &[';'])?;
        body.push_str(k);
        body.push('=');
        body.push_str(v);
        body.push(';');
    }
    if body.len() > V2_MAX_BODY {
        return Err(WireError::FrameTooLong {
            len: body.len(),
            max: V2_MAX_BODY,
        });
    }
    let mut out = format!("{:<6}", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_recorded_responses_parse_as_maps() {
        let m =
            parse_v1_line(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n").unwrap();
        assert_eq!(m.cmd, "response_to_init");
        assert_eq!(m.get("pmi_version"), Some("1"));
        assert_eq!(m.rc(), Ok(0));
        let m =
            parse_v1_line(b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n").unwrap();
        assert_eq!(m.get("pmi_subversion"), Some("1"));
        let m = parse_v1_line(b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n").unwrap();
        assert_eq!(m.rc(), Ok(-1));
        let m = parse_v1_line(b"cmd=get_result rc=0 msg=success value=rank0=hello\\x20world\n")
            .unwrap();
        assert_eq!(m.get("value"), Some("rank0=hello\\x20world"));
        let m = parse_v1_line(b"cmd=barrier_out\n").unwrap();
        assert_eq!(m.rc(), Ok(0));
        assert!(m.fields.is_empty());
        let m = parse_v1_line(b"cmd=put  kvsname=k\tkey=a value=\r\n").unwrap();
        assert_eq!(m.get("value"), Some(""));
        assert_eq!(m.get("key"), Some("a"));
    }

    #[test]
    fn v1_rejects_garbage() {
        assert_eq!(parse_v1_line(b"\n"), Err(WireError::Empty));
        assert_eq!(parse_v1_line(b"key=1 cmd=put\n"), Err(WireError::NoCommand));
        assert_eq!(parse_v1_line(b"hello\n"), Err(WireError::NoCommand));
        assert!(matches!(
            parse_v1_line(b"cmd=put key\n"),
            Err(WireError::MissingEquals { .. })
        ));
        assert_eq!(parse_v1_line(b"cmd=put =x\n"), Err(WireError::EmptyKey));
        assert_eq!(
            parse_v1_line(b"cmd=put key=\xff\n"),
            Err(WireError::NotUtf8)
        );
        let rc = parse_v1_line(b"cmd=x rc=abc").unwrap().rc();
        assert_eq!(rc, Err("abc".to_string()));
    }

    #[test]
    fn v1_format_roundtrip_and_forbidden() {
        let m = Message::new("put")
            .with("kvsname", "kvs_1")
            .with("key", "a")
            .with("value", "x=y");
        let line = format_v1_line(&m).unwrap();
        assert_eq!(line, b"cmd=put kvsname=kvs_1 key=a value=x=y\n");
        assert_eq!(parse_v1_line(&line).unwrap(), m);
        let bad = Message::new("put").with("value", "a b");
        assert!(matches!(
            format_v1_line(&bad),
            Err(WireError::ForbiddenChar { ch: ' ', .. })
        ));
        let bad = Message::new("put").with("value", "a\nb");
        assert!(format_v1_line(&bad).is_err());
        let bad = Message::new("put").with("k=", "a");
        assert!(format_v1_line(&bad).is_err());
        assert!(format_v1_line(&Message::new("")).is_err());
    }

    #[test]
    fn v2_recorded_frames_parse_with_any_padding() {
        let hydra = b"   113cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=3;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;";
        let (m, used) = parse_v2_frame(hydra, V2_MAX_BODY).unwrap().unwrap();
        assert_eq!(used, hydra.len());
        assert_eq!(m.cmd, "fullinit-response");
        assert_eq!(m.get("size"), Some("3"));
        assert_eq!(m.get_bool("debugged"), Some(false));
        for framed in [
            &b"38    cmd=fullinit;pmirank=0;threaded=FALSE;"[..],
            b"000038cmd=fullinit;pmirank=0;threaded=FALSE;",
            b"  38  cmd=fullinit;pmirank=0;threaded=FALSE;",
        ] {
            let (m, used) = parse_v2_frame(framed, V2_MAX_BODY).unwrap().unwrap();
            assert_eq!(used, 44);
            assert_eq!(m.cmd, "fullinit");
            assert_eq!(m.get("threaded"), Some("FALSE"));
        }
        // rc first, cmd later, value with '=' and spaces, missing final ';'.
        let (m, _) = parse_v2_frame(
            b"49    rc=0;cmd=kvs-get-response;value=a= b c;found=TRUE",
            1000,
        )
        .unwrap()
        .unwrap();
        assert_eq!(m.cmd, "kvs-get-response");
        assert_eq!(m.get("value"), Some("a= b c"));
        assert_eq!(m.get_bool("found"), Some(true));
    }

    #[test]
    fn v2_partial_and_bad_frames() {
        let full = format_v2_frame(&Message::new("kvs-fence")).unwrap();
        assert_eq!(full, b"14    cmd=kvs-fence;");
        for cut in 0..full.len() {
            assert_eq!(parse_v2_frame(&full[..cut], V2_MAX_BODY).unwrap(), None);
        }
        let mut two = full.clone();
        two.extend_from_slice(&full);
        let (_, used) = parse_v2_frame(&two, V2_MAX_BODY).unwrap().unwrap();
        assert_eq!(used, full.len());
        assert!(matches!(
            parse_v2_frame(b"1 4   cmd=kvs-fence;", 100),
            Err(WireError::BadLength { .. })
        ));
        assert!(matches!(
            parse_v2_frame(b"      ", 100),
            Err(WireError::BadLength { .. })
        ));
        assert!(matches!(
            parse_v2_frame(b"-1    ", 100),
            Err(WireError::BadLength { .. })
        ));
        assert_eq!(
            parse_v2_frame(b"999999", 100),
            Err(WireError::FrameTooLong {
                len: 999_999,
                max: 100
            })
        );
        assert_eq!(parse_v2_frame(b"3     a=b", 100), Err(WireError::NoCommand));
        assert_eq!(parse_v2_frame(b"2     ;;", 100), Err(WireError::Empty));
        assert!(matches!(
            parse_v2_frame(b"3     abc", 100),
            Err(WireError::MissingEquals { .. })
        ));
    }

    #[test]
    fn v2_format_roundtrip_and_forbidden() {
        let m = Message::new("kvs-put")
            .with("key", "k")
            .with("value", "a b=c");
        let f = format_v2_frame(&m).unwrap();
        let (back, _) = parse_v2_frame(&f, V2_MAX_BODY).unwrap().unwrap();
        assert_eq!(back, m);
        assert!(format_v2_frame(&Message::new("kvs-put").with("value", "a;b")).is_err());
        assert!(format_v2_frame(&Message::new("kvs-put").with("", "a")).is_err());
    }

    /// Random bytes never panic the parsers; random valid messages survive
    /// a format/parse round trip in both framings.
    #[test]
    fn random_inputs_and_roundtrips() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        const ALPHA: &[u8] = b"abcXYZ019-_.:=()[],/ ;";
        for _ in 0..20_000 {
            let n = (next() % 48) as usize;
            let junk: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let _ = parse_v1_line(&junk);
            let _ = parse_v2_frame(&junk, 40);
            let _ = parse_v2_body(&junk);
            let text: Vec<u8> = (0..n)
                .map(|_| ALPHA[(next() % ALPHA.len() as u64) as usize])
                .collect();
            let _ = parse_v1_line(&text);
            let _ = parse_v2_body(&text);
            // Round trip of a message built from the text.
            let s = String::from_utf8(text).unwrap();
            let mut m = Message::new("c");
            for (i, part) in s.split('|').enumerate() {
                m.push(format!("k{i}"), part);
            }
            if let Ok(line) = format_v1_line(&m) {
                assert_eq!(parse_v1_line(&line).unwrap(), m);
            } else {
                assert!(s.contains(' '));
            }
            if let Ok(frame) = format_v2_frame(&m) {
                let (back, used) = parse_v2_frame(&frame, V2_MAX_BODY).unwrap().unwrap();
                assert_eq!((back, used), (m, frame.len()));
            } else {
                assert!(s.contains(';'));
            }
        }
    }

    #[test]
    fn abort_text_round_trips_through_a_pmi1_value() {
        let text = "rank 1 gives up: 50% done; MPI_ERR_OTHER = a\\b\tüñ";
        let enc = encode_abort_text(text, 1000);
        assert!(!enc.contains(' ') && !enc.contains(';') && !enc.contains('='));
        let line = format_v1_line(&Message::new("abort").with(ABORT_TEXT_KEY, &enc)).unwrap();
        let back = parse_v1_line(&line).unwrap();
        assert_eq!(decode_abort_text(back.get(ABORT_TEXT_KEY).unwrap()), text);
        // Cut at a whole character, within the bound.
        let short = encode_abort_text(text, 8);
        assert!(short.len() <= 8);
        assert_eq!(short, "rank%201");
        assert_eq!(decode_abort_text("100%"), "100%");
        assert_eq!(decode_abort_text("%zz%4"), "%zz%4");
    }
}
