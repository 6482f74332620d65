//! Modex values over PMI (`tmpi_base::pmi::PmiModex`): the header
//! `<len>:<parts>:<fnv1a32>:<base64...>` and its continuation parts, as
//! read back from the KVS. The KVS is a singleton client's, filled with the
//! fuzz input, so arbitrary stored values reach the decoder.
//!
//! Input: byte 0 selects the mode; then `\n`-separated values for the
//! header key and parts 1, 2, ... (mode odd: a real value is put first and
//! the input then overwrites some of its parts).
//!
//! Properties:
//! * never panics, no huge allocation whatever length or part count the
//!   header claims;
//! * `get(put(x)) == x` for a value from the input;
//! * a value that decodes is consistent: its length is the header's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::modex::{Modex, ModexError};
use tmpi_base::pmi::{PmiClient, PmiModex};
use tmpi_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let mode = inp.byte();
    let mut m = PmiModex::new(PmiClient::singleton());
    if mode & 1 == 1 {
        // Round trip of the input bytes themselves, then corruption.
        let value = inp.rest().to_vec();
        m.put("fuzz", &value).expect("put");
        m.fence().expect("fence");
        assert_eq!(m.get(0, "fuzz").expect("get"), value);
    }
    let mut part = 0usize;
    while !inp.is_empty() {
        let v = inp.text_until(b'\n');
        let key = if part == 0 {
            "fuzz:0".to_string()
        } else {
            format!("fuzz:0:{part}")
        };
        // The KVS refuses what PMI cannot carry; such values never reach a
        // reader, skip them.
        let _ = m.client().put(&key, &v);
        part += 1;
        if part > 64 {
            break;
        }
    }
    match m.get(0, "fuzz") {
        Ok(bytes) => {
            let header = m.client().get(None, "fuzz:0").unwrap().unwrap();
            let len: usize = header.split(':').next().unwrap().parse().unwrap();
            assert_eq!(bytes.len(), len);
        }
        Err(ModexError::Malformed { .. } | ModexError::NotFound { .. }) => {}
        Err(e) => panic!("unexpected modex error {e}"),
    }
});
