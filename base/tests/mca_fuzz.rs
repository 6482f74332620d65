//! Randomised robustness of the MCA parsers: arbitrary input never panics,
//! and what is printed parses back to the same thing.

use tmpi_base::mca::{
    decode_cmdline, encode_cmdline, parse_bool, parse_int, parse_list, parse_size, parse_tristate,
    ConfigFile, ParamType, SelectionList,
};

/// xorshift64*: deterministic, so a failure reproduces from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A string over an alphabet rich in the characters the parsers care about.
    fn text(&mut self, max: usize) -> String {
        const ALPHA: &[&str] = &[
            "a", "z", "_", "0", "7", "9", "x", "K", "m", "G", "t", "B", "i", ",", "^", "=", ";",
            "%", "%4", "%zz", "#", " ", "\t", "\n", "\r", "\"", "-", "+", ".", "é", "\u{0}",
            "auto", "true", "0x", "self", "sm",
        ];
        let len = self.below(max + 1);
        (0..len).map(|_| ALPHA[self.below(ALPHA.len())]).collect()
    }
}

#[test]
fn parsers_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let types = [
        ParamType::Bool,
        ParamType::Int { min: -5, max: 5 },
        ParamType::Size,
        ParamType::String,
        ParamType::Enum {
            choices: vec!["a".into(), "auto".into()],
        },
        ParamType::Tristate,
        ParamType::List,
        ParamType::Selection,
    ];
    for _ in 0..20_000 {
        let t = rng.text(12);
        let _ = parse_bool(&t);
        let _ = parse_int(&t);
        let _ = parse_size(&t);
        let _ = parse_tristate(&t);
        let _ = parse_list(&t);
        let _ = decode_cmdline(&t);
        let _ = ConfigFile::parse("/fuzz.conf", &t);
        for ty in &types {
            // Every accepted value prints to text that parses back to it.
            if let Ok(v) = ty.parse(&t) {
                assert!(ty.admits(&v), "{ty:?} {t:?}");
                assert_eq!(ty.parse(&v.to_string()).as_ref(), Ok(&v), "{ty:?} {t:?}");
            }
        }
        if let Ok(sel) = SelectionList::parse(&t) {
            assert_eq!(SelectionList::parse(&sel.to_string()), Ok(sel), "{t:?}");
        }
    }
}

#[test]
fn cmdline_roundtrip_random() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..5_000 {
        let n = rng.below(4);
        let pairs: Vec<(String, String)> = (0..n)
            .map(|_| {
                let mut name: String = rng
                    .text(6)
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    name.push('p');
                }
                (name, rng.text(10))
            })
            .collect();
        let enc = encode_cmdline(&pairs);
        assert!(!enc.contains('\0') && !enc.contains('\n'), "{enc:?}");
        assert_eq!(decode_cmdline(&enc), Ok(pairs), "{enc:?}");
    }
}
