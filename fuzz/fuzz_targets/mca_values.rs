//! MCA value parsers (`tmpi_base::mca`): sizes, integers, booleans,
//! tristates, lists, selection lists, and `ParamType::parse` of every type.
//!
//! Input: byte 0 picks the type (and an integer range); the rest is the
//! value text as a user would write it.
//!
//! Properties:
//! * never panics (overflowing sizes and integers are errors);
//! * `parse(display(v)) == v` for every value that parses (the form
//!   `tmpi_info` prints is accepted back);
//! * the free functions agree with `ParamType::parse`;
//! * parsed lists and selection lists have non-empty, trimmed items.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::mca::{
    parse_bool, parse_int, parse_list, parse_size, parse_tristate, ParamType, SelectionList, Value,
};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let ty = match sel % 8 {
        0 => ParamType::Bool,
        1 => match sel >> 3 {
            0 => ParamType::Int {
                min: i64::MIN,
                max: i64::MAX,
            },
            1 => ParamType::Int { min: -1, max: 100 },
            _ => ParamType::Int {
                min: 0,
                max: i64::MAX,
            },
        },
        2 => ParamType::Size,
        3 => ParamType::String,
        4 => ParamType::Enum {
            choices: vec!["auto".into(), "Hydra".into(), "sm".into()],
        },
        5 => ParamType::Tristate,
        6 => ParamType::List,
        _ => ParamType::Selection,
    };
    let parsed = ty.parse(text);
    // The free functions agree with the typed parser.
    match (&ty, &parsed) {
        (ParamType::Bool, p) => assert_eq!(p.clone().ok(), parse_bool(text).ok().map(Value::Bool)),
        (
            ParamType::Int {
                min: i64::MIN,
                max: i64::MAX,
            },
            p,
        ) => {
            assert_eq!(p.clone().ok(), parse_int(text).ok().map(Value::Int))
        }
        (ParamType::Size, p) => assert_eq!(p.clone().ok(), parse_size(text).ok().map(Value::Size)),
        (ParamType::Tristate, p) => {
            assert_eq!(
                p.clone().ok(),
                parse_tristate(text).ok().map(Value::Tristate)
            )
        }
        (ParamType::List, p) => assert_eq!(p.clone().ok(), parse_list(text).ok().map(Value::List)),
        (ParamType::Selection, p) => {
            assert_eq!(
                p.clone().ok(),
                SelectionList::parse(text).ok().map(Value::Selection)
            )
        }
        _ => {}
    }
    if let Ok(v) = parsed {
        assert!(
            ty.admits(&v),
            "{ty:?} does not admit its own parse {v:?} of {text:?}"
        );
        match &v {
            Value::List(items) => {
                assert!(items
                    .iter()
                    .all(|i| !i.is_empty() && i.trim() == i && !i.contains(',')))
            }
            Value::Selection(SelectionList::Include(n) | SelectionList::Exclude(n)) => {
                assert!(!n.is_empty() && n.iter().all(|i| !i.is_empty() && i.trim() == i))
            }
            Value::Int(i) => {
                if let ParamType::Int { min, max } = ty {
                    assert!(*i >= min && *i <= max);
                }
            }
            _ => {}
        }
        let shown = v.to_string();
        let back = ty
            .parse(&shown)
            .unwrap_or_else(|e| panic!("{ty:?}: {v:?} displays as {shown:?}, which fails: {e}"));
        assert_eq!(back, v, "{ty:?}: {text:?} -> {shown:?}");
    }
    // Sizes: the suffix forms agree with the byte count.
    if let Ok(n) = parse_size(text) {
        if n % 1024 == 0 && n > 0 {
            assert_eq!(parse_size(&format!("{}K", n / 1024)), Ok(n));
        }
    }
});
