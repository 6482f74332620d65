//! btl-sm segment layouts (`tmpi_btl_sm::segment::Layout`): the six
//! numbers a peer writes in its segment header, which `Segment::attach`
//! checks with `Layout::validate` before computing every offset from them.
//!
//! Properties of every layout that validates:
//! * no arithmetic overflow (debug assertions are on in fuzz builds);
//! * the segment stays below 4 GiB (relative pointers carry 32-bit offsets);
//! * every fast box (control block + ring) and every fragment slot (64-byte
//!   header + capacity) lies inside `total()`, 64-byte aligned, without
//!   overlapping its neighbour;
//! * `classify` finds exactly the slot starts, with their class and capacity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_btl_sm::segment::{Class, Layout};
use tmpi_fuzz::sm_shm::{FBOX_CTL, FIFO_CTL, FRAG_HDR};
use tmpi_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let l = Layout {
        slots: inp.u32(),
        fbox_size: inp.u32(),
        n_eager: inp.u32(),
        eager_cap: inp.u32(),
        n_max: inp.u32(),
        max_cap: inp.u32(),
    };
    if l.validate().is_err() {
        return;
    }
    let total = l.total();
    assert!(total < (1usize << 32) + 4096, "{l:?}: total {total}");
    assert_eq!(total % 4096, 0);
    assert!(l.fifo() + FIFO_CTL <= l.fbox(0));
    // Checking every slot of a huge pool is slow; the first and last few
    // cover the arithmetic.
    let picks = |n: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..n.min(4)).collect();
        v.extend(n.saturating_sub(4)..n);
        v
    };
    for i in picks(l.slots as usize) {
        let at = l.fbox(i);
        assert_eq!(at % 64, 0);
        assert!(
            at + FBOX_CTL + l.fbox_size as usize <= l.fbox(i + 1).min(total),
            "{l:?} fbox {i}"
        );
    }
    for (class, n, cap) in [
        (Class::Eager, l.n_eager as usize, l.eager_cap as usize),
        (Class::Max, l.n_max as usize, l.max_cap as usize),
    ] {
        for i in picks(n) {
            let at = l.frag(class, i);
            assert_eq!(at % 64, 0, "{l:?} {class:?} {i}");
            assert!(at >= l.fbox(l.slots as usize));
            assert!(at + FRAG_HDR + cap <= total, "{l:?} {class:?} {i} at {at}");
            assert_eq!(l.classify(at), Some((class, cap)), "{l:?} {class:?} {i}");
            assert_eq!(l.classify(at + 8), None);
            if i + 1 < n {
                assert!(at + FRAG_HDR + cap <= l.frag(class, i + 1));
            }
        }
    }
    assert_eq!(l.classify(l.fbox(0)), None);
    assert_eq!(l.classify(total), None);
    let off = inp.u32() as usize;
    if let Some((_, cap)) = l.classify(off) {
        assert!(off + FRAG_HDR + cap <= total);
    }
});
