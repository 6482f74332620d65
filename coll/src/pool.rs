//! A process-wide pool of large byte buffers for collective schedules and
//! the transport's receive buffers.
//!
//! Why: a 1 MiB collective allocates and frees several message-sized
//! buffers per call (the input copy, the receive buffers, the result). glibc
//! serves such sizes from fresh `mmap`s or gives the heap top back to the
//! kernel on free (`M_TRIM_THRESHOLD`), so every call page-faulted and
//! zeroed its buffers again in the kernel, which made a 1 MiB allreduce
//! several times slower (docs/journal/coll-performance.md, "Buffer pool and
//! scratch buffers"). Buffers of at least [`MIN_POOLED`] bytes are kept here
//! instead (at most [`MAX_KEPT`] of them, [`MAX_BYTES`] in all, the oldest
//! dropped first) and reused best-fit.

use std::sync::Mutex;

/// Smallest capacity worth keeping (smaller ones stay on malloc's heap).
pub const MIN_POOLED: usize = 64 * 1024;
/// Most buffers kept.
pub const MAX_KEPT: usize = 16;
/// Most bytes kept (capacities added up).
pub const MAX_BYTES: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn pool() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An empty vector with capacity for at least `len` bytes: a kept buffer
/// (the smallest that fits, if it is no more than 4x too large) or a new one.
pub fn take(len: usize) -> Vec<u8> {
    if len >= MIN_POOLED {
        let mut p = pool();
        let best = p
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len && b.capacity() / 4 <= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut b = p.swap_remove(i);
            b.clear();
            return b;
        }
    }
    Vec::with_capacity(len)
}

/// `len` bytes of unspecified content (initialised: old bytes of a kept
/// buffer, zeros past them) in a pooled buffer, for a buffer every byte of
/// which is written before it is read: no memset of the whole length when
/// a kept buffer was at least that long.
pub fn filled(len: usize) -> Vec<u8> {
    if len < MIN_POOLED {
        return vec![0; len];
    }
    let kept = {
        let mut p = pool();
        p.iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len && b.capacity() / 4 <= len)
            .min_by_key(|(_, b)| (b.len() < len, b.capacity()))
            .map(|(i, _)| i)
            .map(|i| p.swap_remove(i))
    };
    match kept {
        Some(mut b) => {
            if b.len() > len {
                b.truncate(len);
            } else {
                b.resize(len, 0);
            }
            b
        }
        None => vec![0; len],
    }
}

/// A copy of `data` in a pooled buffer.
pub fn copy_of(data: &[u8]) -> Vec<u8> {
    let mut v = take(data.len());
    v.extend_from_slice(data);
    v
}

/// `len` zero bytes in a pooled buffer.
pub fn zeroed(len: usize) -> Vec<u8> {
    if len < MIN_POOLED {
        return vec![0; len];
    }
    let mut v = take(len);
    v.resize(len, 0);
    v
}

/// Gives `buf` back for reuse (dropped when small or larger than the
/// whole pool). When the pool is full the buffers kept longest are
/// dropped first, so the pool follows the sizes in current use.
pub fn give(buf: Vec<u8>) {
    if buf.capacity() < MIN_POOLED || buf.capacity() > MAX_BYTES {
        return;
    }
    let mut p = pool();
    let mut held: usize = p.iter().map(Vec::capacity).sum();
    while !p.is_empty() && (p.len() >= MAX_KEPT || held + buf.capacity() > MAX_BYTES) {
        held -= p.remove(0).capacity();
    }
    p.push(buf);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_reused_small_ones_not() {
        // Other tests of this process may use the pool concurrently: look
        // for our buffer by address among what `take` returns.
        let a = zeroed(MIN_POOLED * 2);
        assert_eq!(a.len(), MIN_POOLED * 2);
        assert!(a.iter().all(|&x| x == 0));
        let ptr = a.as_ptr();
        give(a);
        let mut got = Vec::new();
        let mut found = false;
        for _ in 0..MAX_KEPT + 1 {
            let b = take(MIN_POOLED * 2);
            assert!(b.is_empty() && b.capacity() >= MIN_POOLED * 2);
            found |= b.as_ptr() == ptr;
            got.push(b);
            if found {
                break;
            }
        }
        assert!(found, "a given-back buffer is handed out again");
        // `filled` hands back a kept buffer without clearing it, at the
        // asked length.
        for b in got.drain(..) {
            give(b);
        }
        let mut c = filled(MIN_POOLED * 2);
        c.fill(9);
        let cptr = c.as_ptr();
        give(c);
        let mut found = false;
        for _ in 0..MAX_KEPT + 1 {
            let d = filled(MIN_POOLED * 2 - 1);
            assert_eq!(d.len(), MIN_POOLED * 2 - 1);
            found |= d.as_ptr() == cptr;
            got.push(d);
            if found {
                break;
            }
        }
        assert!(found, "a kept buffer is reused by filled");
        // A request far smaller than every kept buffer gets a new one.
        let small = copy_of(&[7u8; 10]);
        assert_eq!(small, [7u8; 10]);
        for b in got {
            give(b);
        }
    }
}
