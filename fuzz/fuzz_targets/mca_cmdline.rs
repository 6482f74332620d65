//! The `--mca` codec (`tmpi_base::mca::encode_cmdline`/`decode_cmdline`):
//! tmpirun encodes its `--mca` pairs into one environment variable that
//! every rank decodes; a user can also set that variable by hand.
//!
//! Properties:
//! * never panics;
//! * decoded names are parameter names;
//! * `decode(encode(pairs)) == pairs` for the decoded pairs and for pairs
//!   built from the input (any UTF-8 value, names filtered to valid ones);
//! * the encoding holds no `;`/`=` inside a name or value and no control
//!   character, so it survives an environment variable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::mca::{decode_cmdline, encode_cmdline, is_param_name};
use tmpi_fuzz::Input;

fn roundtrip(pairs: &[(String, String)]) {
    let enc = encode_cmdline(pairs);
    assert!(!enc.chars().any(|c| c.is_ascii_control()), "{enc:?}");
    assert!(!enc.contains('\0'));
    let expected_sep = pairs.len().saturating_sub(1);
    assert_eq!(enc.matches(';').count(), expected_sep, "{enc:?}");
    assert_eq!(enc.matches('=').count(), pairs.len(), "{enc:?}");
    let back = decode_cmdline(&enc).unwrap_or_else(|e| panic!("{enc:?}: {e}"));
    assert_eq!(back, pairs, "{enc:?}");
}

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(pairs) = decode_cmdline(s) {
            assert!(pairs.iter().all(|(k, _)| is_param_name(k)));
            roundtrip(&pairs);
        }
    }
    let mut inp = Input::new(data);
    let mut pairs = Vec::new();
    while !inp.is_empty() {
        let k = inp.text_until(0xff);
        let v = inp.text_until(0xff);
        if is_param_name(&k) {
            pairs.push((k, v));
        }
    }
    roundtrip(&pairs);
});
