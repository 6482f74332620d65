//! Faithful Rust transcriptions of the `static inline` verbs of rdma-core 44's
//! `<infiniband/verbs.h>` that tmpi uses. bindgen cannot call them (they are not
//! exported by libibverbs); each one below follows its C body line by line,
//! dispatching through the context's ops table exactly as the header does,
//! including `verbs_get_ctx_op`'s size check against the provider's
//! `verbs_context::sz`.
//!
//! All functions are `unsafe`: they take raw libibverbs objects, which must be
//! live and belong to the library `lib`.

use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::ptr;

use super::loader::Lib;
use super::sys::*;

/// `verbs_get_ctx()`: the `verbs_context` around `ctx`, or NULL when the
/// provider does not use the extended ABI.
///
/// # Safety
/// `ctx` must point to a live `ibv_context`.
pub(crate) unsafe fn verbs_get_ctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: ctx is live (caller contract); abi_compat is a plain field.
    let abi = unsafe { (*ctx).abi_compat };
    // __VERBS_ABI_IS_EXTENDED is ((void *)UINTPTR_MAX)
    if abi as usize != usize::MAX {
        return ptr::null_mut();
    }
    // SAFETY: an extended context is the last member of a verbs_context
    // (verbs.h: "Must be last field in the struct"), so stepping back by its
    // offset stays inside that allocation (C's container_of).
    unsafe { ctx.cast::<u8>().sub(offset_of!(verbs_context, context)) }.cast()
}

/// `verbs_get_ctx_op(ctx, op)`: yields `Some(fn)` only if the context is
/// extended, the provider's `verbs_context` is large enough to contain `op`
/// (`sz >= sizeof(struct verbs_context) - offsetof(struct verbs_context, op)`,
/// the structure grows towards lower addresses), and `op` is set.
macro_rules! verbs_get_ctx_op {
    ($ctx:expr, $op:ident) => {{
        let vctx = verbs_get_ctx($ctx);
        if vctx.is_null() {
            None
        } else {
            // Expanded inside an `unsafe` block: vctx points into the provider's
            // verbs_context; `sz` is the last field before `context`, always present.
            let sz = (*vctx).sz;
            if sz < size_of::<verbs_context>() - offset_of!(verbs_context, $op) {
                None
            } else {
                // The size check proves the provider's structure has this field.
                (*vctx).$op
            }
        }
    }};
}

/// `___ibv_query_port()` (what the `ibv_query_port` macro expands to).
///
/// # Safety
/// `ctx` live, `attr` valid for writes.
pub(crate) unsafe fn query_port(
    lib: &Lib,
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: caller contract; see verbs_get_ctx_op!.
    unsafe {
        match verbs_get_ctx_op!(ctx, query_port) {
            None => {
                ptr::write_bytes(attr, 0, 1);
                (lib.fns.query_port)(ctx, port, attr.cast::<_compat_ibv_port_attr>())
            }
            Some(f) => f(ctx, port, attr, size_of::<ibv_port_attr>()),
        }
    }
}

/// `ibv_query_device_ex()`.
///
/// # Safety
/// `ctx` live, `input` NULL or valid, `attr` valid for writes.
pub(crate) unsafe fn query_device_ex(
    lib: &Lib,
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        if !input.is_null() && (*input).comp_mask != 0 {
            return libc::EINVAL;
        }
        if let Some(f) = verbs_get_ctx_op!(ctx, query_device_ex) {
            let ret = f(ctx, input, attr, size_of::<ibv_device_attr_ex>());
            if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
                return ret;
            }
        }
        // legacy:
        ptr::write_bytes(attr, 0, 1);
        (lib.fns.query_device)(ctx, ptr::addr_of_mut!((*attr).orig_attr))
    }
}

/// `ibv_create_cq_ex()`. On failure returns NULL with errno set.
///
/// # Safety
/// `ctx` live, `cq_attr` valid.
pub(crate) unsafe fn create_cq_ex(
    ctx: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!(ctx, create_cq_ex) {
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
            Some(f) => f(ctx, cq_attr),
        }
    }
}

/// `ibv_create_srq_ex()`. Note the first branch: a request that names only a
/// PD (and at most type BASIC) goes to plain `ibv_create_srq`; anything else,
/// notably `IBV_SRQT_TM`, goes to the provider's `create_srq_ex` or fails with
/// `EOPNOTSUPP` (never silently downgraded to a basic SRQ).
///
/// # Safety
/// `ctx` live, `attr` valid (its `pd`, `cq` live when named by `comp_mask`).
pub(crate) unsafe fn create_srq_ex(
    lib: &Lib,
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: caller contract.
    unsafe {
        let mask = (*attr).comp_mask;
        if (mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) == 0
            && (mask & IBV_SRQ_INIT_ATTR_PD) != 0
            && ((mask & IBV_SRQ_INIT_ATTR_TYPE) == 0 || (*attr).srq_type == IBV_SRQT_BASIC)
        {
            // ibv_srq_init_attr is the prefix of ibv_srq_init_attr_ex (C cast).
            return (lib.fns.create_srq)((*attr).pd, attr.cast::<ibv_srq_init_attr>());
        }
        match verbs_get_ctx_op!(ctx, create_srq_ex) {
            None => {
                set_errno(libc::EOPNOTSUPP);
                ptr::null_mut()
            }
            Some(f) => f(ctx, attr),
        }
    }
}

/// `ibv_post_srq_ops()`.
///
/// # Safety
/// `srq` live, `op` a valid chain, `bad_op` valid for writes.
pub(crate) unsafe fn post_srq_ops(
    srq: *mut ibv_srq,
    op: *mut ibv_ops_wr,
    bad_op: *mut *mut ibv_ops_wr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*srq).context, post_srq_ops) {
            None => {
                *bad_op = op;
                libc::EOPNOTSUPP
            }
            Some(f) => f(srq, op, bad_op),
        }
    }
}

/// `ibv_get_srq_num()`.
///
/// # Safety
/// `srq` live, `num` valid for writes.
pub(crate) unsafe fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match verbs_get_ctx_op!((*srq).context, get_srq_num) {
            None => libc::EOPNOTSUPP,
            Some(f) => f(srq, num),
        }
    }
}

/// `ibv_post_srq_recv()`: through `context->ops.post_srq_recv`.
///
/// # Safety
/// `srq` live, `wr` a valid chain, `bad` valid for writes.
pub(crate) unsafe fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller contract; every provider sets this op.
    unsafe {
        match (*(*srq).context).ops.post_srq_recv {
            Some(f) => f(srq, wr, bad),
            None => {
                *bad = wr;
                libc::EOPNOTSUPP
            }
        }
    }
}

/// `ibv_post_send()`: through `context->ops.post_send`.
///
/// # Safety
/// `qp` live, `wr` a valid chain, `bad` valid for writes.
pub(crate) unsafe fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match (*(*qp).context).ops.post_send {
            Some(f) => f(qp, wr, bad),
            None => {
                *bad = wr;
                libc::EOPNOTSUPP
            }
        }
    }
}

/// `ibv_post_recv()`: through `context->ops.post_recv`.
///
/// # Safety
/// `qp` live, `wr` a valid chain, `bad` valid for writes.
pub(crate) unsafe fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match (*(*qp).context).ops.post_recv {
            Some(f) => f(qp, wr, bad),
            None => {
                *bad = wr;
                libc::EOPNOTSUPP
            }
        }
    }
}

/// `ibv_poll_cq()`: through `context->ops.poll_cq`.
///
/// # Safety
/// `cq` live, `wc` valid for `n` writes.
pub(crate) unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        match (*(*cq).context).ops.poll_cq {
            Some(f) => f(cq, n, wc),
            None => -libc::EOPNOTSUPP,
        }
    }
}

/// `__ibv_reg_mr()` as the `ibv_reg_mr` macro uses it with a constant access
/// mask: plain `ibv_reg_mr` unless an optional-range access flag is set, then
/// `ibv_reg_mr_iova2` with `iova = addr`.
///
/// # Safety
/// `pd` live; `addr..addr+len` mapped for as long as the MR exists.
pub(crate) unsafe fn reg_mr(
    lib: &Lib,
    pd: *mut ibv_pd,
    addr: *mut std::ffi::c_void,
    len: usize,
    access: u32,
) -> *mut ibv_mr {
    // SAFETY: caller contract.
    unsafe {
        // IBV_ACCESS_OPTIONAL_RANGE is #defined as IB_UVERBS_ACCESS_OPTIONAL_RANGE
        if access & IB_UVERBS_ACCESS_OPTIONAL_RANGE == 0 {
            (lib.fns.reg_mr)(pd, addr, len, access as c_int)
        } else if let Some(f) = lib.fns.reg_mr_iova2 {
            f(pd, addr, len, addr as u64, access)
        } else {
            set_errno(libc::EOPNOTSUPP);
            ptr::null_mut()
        }
    }
}

/// `ibv_cq_ex_to_cq()`: the extended CQ begins with the `ibv_cq` members.
pub(crate) fn cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout facts the transcription relies on (checked against the C
    /// header by bindgen's layout assertions too).
    #[test]
    fn verbs_context_layout() {
        // `context` is the last member and `sz` sits right before it.
        assert_eq!(
            offset_of!(verbs_context, context) + size_of::<ibv_context>(),
            size_of::<verbs_context>()
        );
        assert_eq!(
            offset_of!(verbs_context, sz) + size_of::<usize>(),
            offset_of!(verbs_context, context)
        );
        // ibv_cq_ex starts with the ibv_cq members (ibv_cq_ex_to_cq is a cast).
        assert_eq!(offset_of!(ibv_cq_ex, context), offset_of!(ibv_cq, context));
        assert_eq!(offset_of!(ibv_cq_ex, cqe), offset_of!(ibv_cq, cqe));
        assert_eq!(
            offset_of!(ibv_cq_ex, async_events_completed),
            offset_of!(ibv_cq, async_events_completed)
        );
        // ibv_srq_init_attr is a prefix of ibv_srq_init_attr_ex.
        assert_eq!(
            offset_of!(ibv_srq_init_attr_ex, attr),
            offset_of!(ibv_srq_init_attr, attr)
        );
    }

    /// A fake extended context: verbs_get_ctx_op! honours `sz` and NULL ops.
    #[test]
    fn ctx_op_size_check() {
        unsafe extern "C" fn fake_ops(
            _: *mut ibv_srq,
            _: *mut ibv_ops_wr,
            _: *mut *mut ibv_ops_wr,
        ) -> c_int {
            4242
        }
        let mut v: Box<verbs_context> = Box::default();
        v.context.abi_compat = usize::MAX as *mut _;
        v.sz = size_of::<verbs_context>();
        v.post_srq_ops = Some(fake_ops);
        let ctx: *mut ibv_context = &mut v.context;
        let mut srq = ibv_srq {
            context: ctx,
            ..Default::default()
        };
        let mut op = ibv_ops_wr::default();
        let mut bad: *mut ibv_ops_wr = ptr::null_mut();
        // SAFETY: all pointers point at live locals.
        assert_eq!(unsafe { post_srq_ops(&mut srq, &mut op, &mut bad) }, 4242);
        // A provider whose verbs_context is too old to hold post_srq_ops.
        v.sz = size_of::<verbs_context>() - offset_of!(verbs_context, post_srq_ops) - 1;
        // SAFETY: as above.
        let rc = unsafe { post_srq_ops(&mut srq, &mut op, &mut bad) };
        assert_eq!(rc, libc::EOPNOTSUPP);
        assert_eq!(bad, &mut op as *mut _);
        // Not an extended context at all.
        v.sz = size_of::<verbs_context>();
        v.context.abi_compat = ptr::null_mut();
        // SAFETY: as above.
        assert_eq!(
            unsafe { post_srq_ops(&mut srq, &mut op, &mut bad) },
            libc::EOPNOTSUPP
        );
        // Extended, large enough, but the provider leaves the op NULL.
        v.context.abi_compat = usize::MAX as *mut _;
        v.post_srq_ops = None;
        // SAFETY: as above.
        assert_eq!(
            unsafe { post_srq_ops(&mut srq, &mut op, &mut bad) },
            libc::EOPNOTSUPP
        );
    }
}
