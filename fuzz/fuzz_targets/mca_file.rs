//! MCA parameter files (`tmpi_base::mca::ConfigFile::parse`): the user's
//! `$HOME/.tmpi/mca-params.conf` and the system file.
//!
//! Properties:
//! * never panics;
//! * every entry has a valid parameter name, a line number within the file
//!   and text no longer than its line;
//! * `parse(format(f)) == f`: writing the entries back as `name = "value"`
//!   lines gives the same names and values;
//! * an error names a line of the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::mca::{is_param_name, ConfigFile, McaError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count();
    match ConfigFile::parse("/fuzz/mca-params.conf", text) {
        Ok(f) => {
            let mut prev = 0;
            let mut out = String::new();
            for e in &f.entries {
                assert!(is_param_name(&e.name), "{e:?}");
                assert!(e.line > prev && e.line <= lines, "{e:?} of {lines} lines");
                prev = e.line;
                let raw = text.lines().nth(e.line - 1).unwrap();
                assert!(
                    e.name.len() + e.value.len() < raw.len(),
                    "{e:?} from {raw:?}"
                );
                assert!(!e.value.contains('\n'));
                out.push_str(&format!("{} = \"{}\"\n", e.name, e.value));
            }
            let back = ConfigFile::parse("/fuzz/mca-params.conf", &out)
                .unwrap_or_else(|e| panic!("reformatted file does not parse: {e}\n{out}"));
            assert_eq!(back.entries.len(), f.entries.len());
            for (a, b) in back.entries.iter().zip(&f.entries) {
                assert_eq!((&a.name, &a.value), (&b.name, &b.value), "{out}");
            }
            if let Some(last) = f.entries.last() {
                assert_eq!(f.get(&last.name), Some(last));
            }
        }
        Err(McaError::MalformedFile { line, .. }) => {
            assert!(
                line >= 1 && line <= lines,
                "error at line {line} of {lines}"
            );
        }
        Err(e) => panic!("unexpected error kind {e}"),
    }
});
