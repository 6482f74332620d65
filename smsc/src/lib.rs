//! tmpi-smsc: the single-copy mechanisms between processes of one node,
//! after Open MPI's `smsc` framework ("shared-memory single copy").
//!
//! A message between two processes of a node can go through a shared
//! segment (the sender copies it in, the receiver copies it out: two
//! copies) or be copied once, straight from the sender's memory into the
//! receiver's, with the kernel's help. The second needs an OS mechanism and
//! a permission, which several layers use: btl-sm's rendezvous `get` and
//! its cooperative copy of large messages, and coll's `sm` component for
//! allgather and alltoall above `coll_sm_max`. The mechanisms live here so
//! that both use the same code, and coll does not depend on a BTL.
//!
//! * [`cma`] — **cross-memory attach**: `process_vm_readv(2)` (the
//!   receiver reads the sender's memory) and `process_vm_writev(2)` (the
//!   sender writes into the receiver's), with the ptrace permission set-up
//!   ([`cma::allow_ptracer_any`], as Open MPI's vader does under Yama
//!   `ptrace_scope = 1`) and a probe word ([`cma::PROBE`]) peers read to
//!   find out whether CMA works between them. The basic mechanism of both
//!   users: btl-sm probes every peer at `add_procs` with
//!   `btl_sm_single_copy=auto` (the default) and falls back to pipelined
//!   fragments through the segment when a probe fails (`EPERM` under Yama
//!   or in containers); coll's sm probes once per communicator
//!   (`coll_sm_single_copy`) and keeps the calls on messages when any rank
//!   cannot read any other.
//! * [`splice`] — **pipes that carry page references**: the sender
//!   `vmsplice(2)`s its buffer into a pipe (the kernel takes references to
//!   the pages, no copy) and the receiver `read(2)`s it out (the one
//!   copy), having taken the pipe's read end from the sender's fd table
//!   with `pidfd_getfd(2)` under the same permission as CMA. Why: reading
//!   another process's pages with `process_vm_readv` costs the kernel work
//!   per source page beside the copy, while `vmsplice` pins the sender's
//!   own pages on its fast path and the `read` is a plain copy. Not always
//!   cheaper (cores far apart, pages never written), so coll's sm uses it
//!   on small communicators only (`coll_sm_splice_max_ranks`), times both
//!   ways as it goes and lets each reader ask for the cheaper one; btl-sm
//!   does not use it.
//! * [`huge`] — **huge pages under reused sources**: a peer's
//!   `process_vm_readv` pins every 4 KiB page of the source it reads; on a
//!   transparent huge page it walks and counts once per 2 MiB. The owner of
//!   a source that is read again and again asks the kernel to back its
//!   whole 2 MiB ranges with huge pages (`madvise(MADV_COLLAPSE)`), once
//!   per range, only for ranges already in memory. Chosen by how often a
//!   range is seen (`btl_sm_huge_after` for btl-sm's registered send
//!   buffers, `coll_sm_huge_after` for coll's published blocks; 0 = never).
//! * [`copy_alone`] — **a receiver's request to copy alone**: while a
//!   [`CopyAlone`] guard lives on a thread, btl-sm's whole-region gets of
//!   that thread skip the cooperative copy (the sender writing part of the
//!   message into the receiver's buffer). The bytes the sender wrote sit
//!   in the sender's cache, which matters to a reduction folding them right
//!   after the get; coll's reduce times both ways and sets the guard when
//!   copying alone costs less (`tmpi-coll`'s `reduce_copy`). A hint only,
//!   never a correctness matter.
//!
//! Every system call sits in its module's small `unsafe` blocks, each with
//! its `SAFETY:` reasoning; the callers' protocols decide when the bytes
//! read are valid (a sender keeps its buffer until the receiver said it is
//! done).

pub mod cma;
pub mod copy_alone;
pub mod huge;
pub mod splice;

pub use copy_alone::CopyAlone;
