//! One test per matching rule and edge case.

use crate::*;

type E = Engine<u64, u64>;

#[test]
fn exact_match_after_post() {
    let mut e = E::new();
    let r = e.post_recv(RecvSpec::exact(1, 2, 3), 10).unwrap();
    assert!(matches!(r, PostOutcome::Posted { seq: 0, .. }));
    let a = e.arrive(Envelope::new(1, 2, 3), 20).unwrap();
    assert!(matches!(
        a,
        ArriveOutcome::Matched {
            recv: 10,
            seq: 0,
            ..
        }
    ));
    assert_eq!(e.posted_len(), 0);
}
