//! [`TagOffload`] for an openib module: the NIC's tag list behind the BTL
//! interface's tag capability.
//!
//! This file is the mechanism the pml must not need to know: which buffer a
//! tagged receive is posted with (a pooled bounce buffer, registered once,
//! or the receive's own buffer with a copy of the bytes a tagged eager
//! message overwrites), what the module's completions mean for one receive
//! (one completion or mlx5's two, the three software-rendezvous forms, a
//! failed NIC read that must be answered with an error FIN), how an eager
//! message is told from a rendezvous request when the first completion
//! carries no packet (the sender's app_ctx), and which rendezvous requests
//! taken in software are still waiting for their FIN.
//!
//! An eager message into a receive's own buffer is not copied out: the NIC
//! scatters `header | payload` (the TMH stripped) at the start of the
//! buffer; the module moves the payload down over the header (the header
//! length travels in the sender's app_ctx, which mlx5 reports with the
//! match), hands up the header alone, and puts back the bytes past the
//! payload from the copy taken at the ADD, so the buffer changes only
//! where the message goes.
//!
//! Everything here runs on the pml's progress thread, under its lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tmpi_btl::{BtlError, RemoteRegion, TagCaps, TagData, TagEvent, TagMsg, TagOffload, TagRndv};
use tmpi_verbs::wire::{Rvh, Tmh, TmhOpcode, RVH_LEN, TMH_LEN};
use tmpi_verbs::{AccessFlags, Provider};

use crate::btl_impl::{btl_err, OpenibBtl};
use crate::buf::{FragKind, RecvFrag};
use crate::module::{Event, Module, Op, TmEvent, FIN_ERROR_LEN, MAX_RNDV_LEN};
use crate::rcache::Reg;
use crate::tm::TmHandle;

/// The mark of every tagged eager message this module sends: its app_ctx
/// is this value with the length of the sender's header
/// ([`TagOffload::send_tagged`]'s `hdr`) in the low 16 bits. A rendezvous
/// request never carries an app_ctx with this mark, so that a match whose
/// first completion has no packet (mlx5's two-completion forms) is known to
/// be an eager message or a rendezvous by the app_ctx alone, and the
/// receiver knows where the payload starts without reading the header.
pub const EAGER_APP_CTX: u32 = 0x4541_0000;

/// Bits of an eager app_ctx that hold the header length.
const EAGER_HDR_MASK: u32 = 0xFFFF;

/// The app_ctx of a tagged eager message whose header is `hdr_len` bytes
/// (`None`: too long to say).
pub fn eager_app_ctx(hdr_len: usize) -> Option<u32> {
    let n = u32::try_from(hdr_len)
        .ok()
        .filter(|&n| n <= EAGER_HDR_MASK)?;
    Some(EAGER_APP_CTX | n)
}

/// The header length of a tagged eager message with this app_ctx; `None`
/// when the app_ctx is not that of a tagged eager message.
pub fn eager_header_len(app_ctx: u32) -> Option<usize> {
    (app_ctx & !EAGER_HDR_MASK == EAGER_APP_CTX).then_some((app_ctx & EAGER_HDR_MASK) as usize)
}

/// Tokens of rendezvous requests taken in software: unique in the process
/// (high bit set), whichever module issued them.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1 << 63);

/// A tagged buffer: a bounce buffer, or the receive's own buffer with a
/// copy of its first bytes (what a tagged eager message or an incomplete
/// rendezvous request may overwrite: MPI lets a receive modify only the
/// bytes of the message it gets).
enum TagBuf<P: Provider> {
    Bounce(Bounce<P>),
    User(*mut u8, usize, Vec<u8>),
}

// SAFETY: the raw pointer of `TagBuf::User` names a receive's buffer that
// the caller lent to this module until the receive ends (`post_recv`'s
// contract); it is only dereferenced on the pml's progress thread, under
// the pml's lock, like every other use of the module.
unsafe impl<P: Provider> Send for TagBuf<P> {}

/// A bounce buffer, registered once for its lifetime (`pin`; `None` when
/// registering failed: the ADD registers it then) and reused from the pool.
struct Bounce<P: Provider> {
    mem: Vec<u8>,
    pin: Option<Reg<P>>,
}

impl<P: Provider> TagBuf<P> {
    /// The first `n` bytes (at most the buffer), as the NIC placed them; a
    /// user buffer gets its original first bytes back.
    fn take_head(&self, n: usize) -> Vec<u8> {
        match self {
            TagBuf::Bounce(b) => b.mem[..n.min(b.mem.len())].to_vec(),
            TagBuf::User(ptr, len, saved) => {
                let n = n.min(*len);
                // SAFETY: the receive's buffer, valid until the receive ends
                // (`post_recv`'s contract; it has not: the NIC just returned
                // the entry); the NIC wrote these bytes before the
                // completion was polled; nothing else accesses it meanwhile.
                let s = unsafe { std::slice::from_raw_parts_mut(*ptr, n) };
                let out = s.to_vec();
                let k = n.min(saved.len());
                s[..k].copy_from_slice(&saved[..k]);
                out
            }
        }
    }

    /// Gives a user buffer its first `n` bytes back (what the NIC wrote
    /// there that is not the receive's data).
    fn restore(&self, n: usize) {
        if let TagBuf::User(ptr, len, saved) = self {
            let k = n.min(*len).min(saved.len());
            // SAFETY: as in `take_head`.
            let s = unsafe { std::slice::from_raw_parts_mut(*ptr, k) };
            s.copy_from_slice(&saved[..k]);
        }
    }

    /// An eager message of `n` bytes, `header` bytes of header first, that
    /// the NIC placed at the start of a user buffer: the payload is moved
    /// to the start, the bytes past it get their original values back, the
    /// header comes out. `None` for a bounce buffer or a message that does
    /// not fit what the buffer's copy can restore (copied out instead).
    fn place(&self, n: usize, header: usize) -> Option<TagData> {
        let TagBuf::User(ptr, len, saved) = self else {
            return None;
        };
        if header > n || n > *len || n > saved.len() {
            return None;
        }
        // SAFETY: as in `take_head` (`n` is within the buffer).
        let s = unsafe { std::slice::from_raw_parts_mut(*ptr, n) };
        let head = s[..header].to_vec();
        let payload = n - header;
        s.copy_within(header.., 0);
        s[payload..].copy_from_slice(&saved[payload..n]);
        Some(TagData::Placed {
            header: head,
            len: payload,
        })
    }
}

/// What a tagged buffer holds after an eager message of `n` bytes with the
/// given app_ctx: placed in a user buffer when the app_ctx names its
/// header, else copied out (a bounce buffer, or a sender that is not this
/// module's `send_tagged`).
fn eager_data<P: Provider>(buf: &TagBuf<P>, n: usize, app_ctx: u32) -> TagData {
    eager_header_len(app_ctx)
        .and_then(|h| buf.place(n, h))
        .unwrap_or_else(|| TagData::Msg(TagMsg::Eager(buf.take_head(n))))
}

/// A tagged buffer in the NIC's list.
struct Tagged<P: Provider> {
    buf: TagBuf<P>,
    handle: TmHandle,
    recv: u64,
    /// World rank of the receive's source: the sender of whatever matches.
    peer: u32,
}

/// A tagged buffer the NIC matched, waiting for its data.
struct PendingMatch<P: Provider> {
    buf: TagBuf<P>,
    recv: u64,
    peer: u32,
    /// The message's TMH as the match completion gave it (opcode EAGER for
    /// an eager message, RNDV otherwise).
    tmh: Tmh,
}

/// The tag-offload state of one openib module.
pub(crate) struct TagState<P: Provider> {
    /// Size of every bounce buffer (the module's eager limit: any tagged
    /// eager message fits).
    buf_len: usize,
    /// Posted tagged buffers by list id.
    bufs: HashMap<u64, Tagged<P>>,
    /// Tagged buffers the NIC matched whose data are still coming.
    pending: HashMap<u64, PendingMatch<P>>,
    /// Bounce buffers not in use (at most the list size).
    pool: Vec<Bounce<P>>,
    /// Rendezvous requests taken in software, by (peer, token), until
    /// their FIN goes out.
    rts_in: HashMap<(u32, u64), (Tmh, Rvh)>,
}

impl<P: Provider> TagState<P> {
    pub(crate) fn new(buf_len: usize) -> Self {
        TagState {
            buf_len,
            bufs: HashMap::new(),
            pending: HashMap::new(),
            pool: Vec::new(),
            rts_in: HashMap::new(),
        }
    }

    /// A tagged buffer is back from the NIC: a bounce buffer returns to
    /// the pool.
    fn recycle(&mut self, buf: TagBuf<P>, max_tags: usize) {
        if let TagBuf::Bounce(b) = buf {
            if self.pool.len() < max_tags {
                self.pool.push(b);
            }
        }
    }

    /// Every registration is released (before the module goes); bounce
    /// memory stays until the state is dropped.
    pub(crate) fn unpin_all(&mut self) {
        let bufs = self.bufs.values_mut().map(|t| &mut t.buf);
        let pending = self.pending.values_mut().map(|p| &mut p.buf);
        for b in bufs.chain(pending) {
            if let TagBuf::Bounce(b) = b {
                b.pin = None;
            }
        }
        for b in &mut self.pool {
            b.pin = None;
        }
    }

    /// A rendezvous request as software takes it: remembered under a fresh
    /// token until its FIN.
    fn rndv_msg(&mut self, peer: u32, tmh: Tmh, rvh: Rvh) -> TagMsg {
        if rvh.len == FIN_ERROR_LEN {
            return TagMsg::Invalid("rendezvous request with the error length".into());
        }
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed) | (1 << 63);
        self.rts_in.insert((peer, token), (tmh, rvh));
        TagMsg::Rndv(TagRndv {
            tag: tmh.tag,
            region: RemoteRegion {
                addr: rvh.va,
                len: u64::from(rvh.len),
                key: u64::from(rvh.rkey),
            },
            len: u64::from(rvh.len),
            token,
        })
    }
}

/// Bytes of TMH + RVH (what an incomplete rendezvous leaves in the buffer).
const TMH_AND_RVH: usize = TMH_LEN + RVH_LEN;

/// Events of the module that concern the offload, as [`TagEvent`]s.
struct Translate<'a, P: Provider> {
    st: &'a mut TagState<P>,
    module: &'a mut Module<P>,
    /// The module has a NIC list (its unexpected messages are counted).
    list: bool,
    max_tags: usize,
    out: &'a mut Vec<TagEvent>,
}

impl<P: Provider> Translate<'_, P> {
    fn event(&mut self, ev: Event) {
        match ev {
            Event::Recv(f) if f.kind == FragKind::Rndv && f.rvh.is_some() => self.unexpected(f),
            Event::Recv(f) if eager_header_len(f.tmh.app_ctx).is_some() && f.rvh.is_none() => {
                self.unexpected(f)
            }
            Event::RndvDone { id, .. } => self.out.push(TagEvent::RndvSent { id, ok: true }),
            Event::Failed {
                id,
                op: Op::Rndv,
                peer,
                error,
            } => {
                tracing::error!(target: "btl_openib", peer, "rendezvous send to rank {peer} failed: {error}");
                self.out.push(TagEvent::RndvSent { id, ok: false })
            }
            Event::Tm(t) if self.list => self.tm_event(t),
            Event::Failed {
                id,
                op: Op::TaggedRecv,
                error,
                ..
            } if self.list => self.failed(id, error.to_string()),
            Event::Failed {
                peer,
                op: Op::Send,
                error,
                ..
            } => self.out.push(TagEvent::Lost {
                peer,
                error: error.to_string(),
            }),
            Event::Failed {
                peer, op, error, ..
            } => {
                tracing::error!(target: "btl_openib", peer, "openib {} failed: {error}", op_name(op));
            }
            Event::Recv(f) => {
                tracing::error!(target: "btl_openib", peer = f.peer, "tagged message of an unknown kind from rank {} dropped", f.peer);
            }
            _ => {}
        }
    }

    /// A tagged message no entry took (or any on a module without a list).
    fn unexpected(&mut self, f: RecvFrag) {
        let counted = self.list && f.unexpected;
        let msg = match f.rvh {
            Some(rvh) => self.st.rndv_msg(f.peer, f.tmh, rvh),
            None => TagMsg::Eager(f.payload().to_vec()),
        };
        self.out.push(TagEvent::Unexpected {
            peer: f.peer,
            counted,
            msg,
        });
    }

    fn tm_event(&mut self, t: TmEvent) {
        match t {
            TmEvent::Added { recv_id, sync_req } => self.out.push(TagEvent::Added {
                id: recv_id,
                sync_req,
            }),
            TmEvent::Matched {
                recv_id,
                tag,
                app_ctx,
                byte_len,
                complete,
                ..
            } => self.matched(recv_id, tag, app_ctx, byte_len, complete),
            TmEvent::DataValid { recv_id, byte_len } => self.data_valid(recv_id, byte_len),
            TmEvent::RndvIncomplete {
                recv_id,
                tmh,
                rvh,
                after_match,
            } => self.rndv_incomplete(recv_id, tmh, rvh, after_match),
            TmEvent::Deleted { recv_id } => {
                if let Some(t) = self.st.bufs.remove(&recv_id) {
                    self.st.recycle(t.buf, self.max_tags);
                }
                self.out.push(TagEvent::Deleted { id: recv_id });
            }
            TmEvent::DelConsumed { recv_id } => {
                self.out.push(TagEvent::DelConsumed { id: recv_id })
            }
            TmEvent::Synced => self.out.push(TagEvent::Synced),
        }
    }

    /// The NIC's match of a tagged buffer, in matching order: complete (a
    /// single-packet eager message is in the buffer), or the first of two
    /// completions (the data follow).
    fn matched(&mut self, recv_id: u64, tag: u64, app_ctx: u32, byte_len: u32, complete: bool) {
        let Some(t) = self.st.bufs.remove(&recv_id) else {
            tracing::error!(target: "btl_openib", recv_id, "NIC match for no tagged buffer");
            return;
        };
        let data = if complete {
            let data = eager_data(&t.buf, byte_len as usize, app_ctx);
            self.st.recycle(t.buf, self.max_tags);
            Some(Ok(data))
        } else {
            let opcode = if eager_header_len(app_ctx).is_some() {
                TmhOpcode::Eager
            } else {
                TmhOpcode::Rndv
            };
            self.st.pending.insert(
                recv_id,
                PendingMatch {
                    buf: t.buf,
                    recv: t.recv,
                    peer: t.peer,
                    tmh: Tmh {
                        opcode,
                        app_ctx,
                        tag,
                    },
                },
            );
            None
        };
        self.out.push(TagEvent::Matched {
            id: recv_id,
            recv: t.recv,
            peer: t.peer,
            tag,
            data,
        });
    }

    /// The data of a pending match are in: the rest of an eager message,
    /// or a rendezvous the NIC read (and answered).
    fn data_valid(&mut self, recv_id: u64, byte_len: u32) {
        let Some(p) = self.st.pending.remove(&recv_id) else {
            tracing::error!(target: "btl_openib", recv_id, "NIC data for no pending match");
            self.out.push(TagEvent::Data {
                id: recv_id,
                recv: u64::MAX,
                peer: u32::MAX,
                result: Err("NIC data for no pending match".into()),
            });
            return;
        };
        let result = if p.tmh.opcode == TmhOpcode::Eager {
            Ok(eager_data(&p.buf, byte_len as usize, p.tmh.app_ctx))
        } else if matches!(p.buf, TagBuf::User(..)) {
            Ok(TagData::Read(byte_len as usize))
        } else {
            Err("NIC rendezvous into a bounce buffer".to_string())
        };
        self.st.recycle(p.buf, self.max_tags);
        self.out.push(TagEvent::Data {
            id: recv_id,
            recv: p.recv,
            peer: p.peer,
            result,
        });
    }

    /// A rendezvous request longer than the tagged buffer: the NIC consumed
    /// the entry and left TMH+RVH in the buffer; software reads and answers.
    fn rndv_incomplete(&mut self, recv_id: u64, tmh: Tmh, rvh: Option<Rvh>, after_match: bool) {
        let (buf, recv, peer, tmh) = if after_match {
            let Some(p) = self.st.pending.remove(&recv_id) else {
                tracing::error!(target: "btl_openib", recv_id, "software rendezvous for no pending match");
                return;
            };
            let tmh = Tmh {
                opcode: TmhOpcode::Rndv,
                ..p.tmh
            };
            (p.buf, p.recv, p.peer, tmh)
        } else {
            let Some(t) = self.st.bufs.remove(&recv_id) else {
                tracing::error!(target: "btl_openib", recv_id, "software rendezvous for no tagged buffer");
                return;
            };
            (t.buf, t.recv, t.peer, tmh)
        };
        // TMH + RVH landed in the buffer: give a user buffer its bytes back.
        buf.restore(TMH_AND_RVH);
        self.st.recycle(buf, self.max_tags);
        let msg = match rvh {
            Some(rvh) => match self.st.rndv_msg(peer, tmh, rvh) {
                TagMsg::Invalid(why) => Err(why),
                m => Ok(m),
            },
            None => Err("incomplete NIC rendezvous without its request".to_string()),
        };
        if after_match {
            self.out.push(TagEvent::Data {
                id: recv_id,
                recv,
                peer,
                result: msg.map(TagData::Msg),
            });
        } else {
            self.out.push(TagEvent::Matched {
                id: recv_id,
                recv,
                peer,
                tag: tmh.tag,
                data: Some(msg.map(TagData::Msg)),
            });
        }
    }

    /// A tagged receive failed at the NIC: before its match (the receive
    /// fails) or after it (its data never came). A rendezvous the NIC was
    /// reading gets an error FIN, so the send fails rather than hangs: to
    /// the receive's source, since the NIC's completions need not name the
    /// sender's QP.
    fn failed(&mut self, recv_id: u64, error: String) {
        if let Some(p) = self.st.pending.remove(&recv_id) {
            tracing::error!(target: "btl_openib", recv = p.recv, "offloaded receive failed after its match: {error}");
            if p.tmh.opcode == TmhOpcode::Rndv {
                let rvh = Rvh {
                    va: 0,
                    rkey: 0,
                    len: 0,
                };
                if let Err(e) = self.module.send_fin_error(p.peer, p.tmh, rvh) {
                    tracing::warn!(target: "btl_openib", peer = p.peer, "could not tell rank {} its rendezvous failed: {e}", p.peer);
                }
            }
            self.st.recycle(p.buf, self.max_tags);
            self.out.push(TagEvent::Data {
                id: recv_id,
                recv: p.recv,
                peer: p.peer,
                result: Err(error),
            });
        } else if let Some(t) = self.st.bufs.remove(&recv_id) {
            self.st.recycle(t.buf, self.max_tags);
            tracing::error!(target: "btl_openib", recv = t.recv, "tagged receive failed: {error}");
            self.out.push(TagEvent::Failed {
                id: recv_id,
                recv: t.recv,
                error,
            });
        }
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Send => "send",
        Op::Rndv => "rendezvous send",
        Op::Get => "RDMA read",
        Op::TaggedRecv => "tagged receive",
    }
}

fn no_list() -> BtlError {
    BtlError::Unsupported("tag matching list")
}

impl<P: Provider + 'static> TagOffload for OpenibBtl<P> {
    fn caps(&self) -> Option<TagCaps> {
        let c = self.module.as_ref()?.tm_caps()?;
        Some(TagCaps {
            max_tags: c.max_num_tags,
            max_ops: c.max_ops,
        })
    }

    fn tagged_limit(&self) -> usize {
        self.module.as_ref().map_or(0, |m| m.eager_limit())
    }

    fn send_tagged(
        &mut self,
        peer: u32,
        tag: u64,
        hdr: &[u8],
        payload: &[u8],
    ) -> Result<(), BtlError> {
        let Some(app_ctx) = eager_app_ctx(hdr.len()) else {
            return Err(BtlError::TooLarge {
                len: hdr.len(),
                max: EAGER_HDR_MASK as usize,
            });
        };
        self.m()?
            .send_eager_hdr(peer, tag, app_ctx, hdr, payload, 0)
            .map_err(|e| btl_err(e, peer))
    }

    unsafe fn send_rndv(
        &mut self,
        peer: u32,
        tag: u64,
        buf: *const u8,
        len: usize,
        id: u64,
    ) -> Result<(), BtlError> {
        if len > MAX_RNDV_LEN {
            return Err(BtlError::TooLarge {
                len,
                max: MAX_RNDV_LEN,
            });
        }
        // The FIN is found by (peer, tag, app_ctx): the send's id folded to
        // 32 bits keeps concurrent requests of one tag apart (a collision is
        // refused by the module and the caller sends another way).
        let app_ctx = (id as u32) ^ ((id >> 32) as u32);
        if eager_header_len(app_ctx).is_some() {
            return Err(BtlError::Unsupported(
                "rendezvous id folding to the eager app_ctx",
            ));
        }
        let m = self.m()?;
        // SAFETY: forwarded from this function's contract (the buffer stays
        // valid and unmodified until the request's RndvSent event).
        unsafe { m.send_rndv(peer, tag, app_ctx, buf, len, &[], id) }.map_err(|e| btl_err(e, peer))
    }

    fn send_fin(&mut self, peer: u32, token: u64, ok: bool) -> Option<Result<(), BtlError>> {
        let (tmh, rvh) = self.tags.rts_in.remove(&(peer, token))?;
        if !ok {
            tracing::error!(target: "btl_openib", peer, "rendezvous request from rank {peer} not read; error FIN");
        }
        let Some(m) = self.module.as_mut() else {
            return Some(Err(BtlError::Finalized));
        };
        let r = if ok {
            m.send_fin(peer, tmh, rvh)
        } else {
            m.send_fin_error(peer, tmh, rvh)
        };
        Some(match r {
            Ok(()) => Ok(()),
            Err(e) => {
                let e = btl_err(e, peer);
                if matches!(e, BtlError::WouldBlock) {
                    self.tags.rts_in.insert((peer, token), (tmh, rvh));
                }
                Err(e)
            }
        })
    }

    unsafe fn post_recv(
        &mut self,
        id: u64,
        recv: u64,
        source: u32,
        tag: u64,
        mask: u64,
        user: Option<(*mut u8, usize)>,
        unexpected_cnt: u32,
    ) -> Result<(), BtlError> {
        let max_tags = self.caps().ok_or_else(no_list)?.max_tags as usize;
        let Some(module) = self.module.as_mut() else {
            return Err(BtlError::Finalized);
        };
        let st = &mut self.tags;
        let buf_len = st.buf_len;
        // The receive's own buffer when every tagged eager message fits (it
        // lands there whole, its payload is moved into place and the bytes
        // past it restored from the copy taken here); a NIC rendezvous is
        // then read straight into it. Otherwise a bounce buffer.
        let mut buf = match user {
            Some((ptr, len)) if len >= buf_len && len <= u32::MAX as usize => {
                // SAFETY: the receive's buffer (valid, this function's
                // contract), not yet given to the NIC.
                let head = unsafe { std::slice::from_raw_parts(ptr, buf_len) };
                TagBuf::User(ptr, len, head.to_vec())
            }
            _ => TagBuf::Bounce(st.pool.pop().unwrap_or_else(|| {
                let mut mem = vec![0u8; buf_len];
                // SAFETY: the Vec's heap memory stays allocated while the
                // pin lives (both move together; the pin is dropped first,
                // in `unpin_all`, before the module is finalized).
                let pin = unsafe {
                    module.register(mem.as_mut_ptr(), mem.len(), AccessFlags::LOCAL_WRITE)
                }
                .ok();
                Bounce { mem, pin }
            })),
        };
        let (ptr, len) = match &mut buf {
            TagBuf::Bounce(b) => (b.mem.as_mut_ptr(), b.mem.len()),
            TagBuf::User(p, l, _) => (*p, *l),
        };
        // SAFETY: a bounce buffer's heap allocation does not move when the
        // Vec moves into `bufs`, where it stays (untouched) until the
        // receive ended (its Matched, Deleted or Failed event removes it)
        // or the module is finalized. A user buffer stays valid until the
        // receive ended (this function's contract).
        let r = unsafe { module.tm_post_recv(ptr, len, tag, mask, id, unexpected_cnt) };
        match r {
            Ok(handle) => {
                st.bufs.insert(
                    id,
                    Tagged {
                        buf,
                        handle,
                        recv,
                        peer: source,
                    },
                );
                Ok(())
            }
            Err(e) => {
                st.recycle(buf, max_tags);
                Err(btl_err(e, source))
            }
        }
    }

    fn del(&mut self, id: u64, unexpected_cnt: u32) -> Result<(), BtlError> {
        let Some(t) = self.tags.bufs.get(&id) else {
            return Err(BtlError::Unsupported("DEL of a receive not in the list"));
        };
        let handle = t.handle;
        let m = self.module.as_mut().ok_or(BtlError::Finalized)?;
        m.tm_del(handle, unexpected_cnt)
            .map_err(|e| btl_err(e, u32::MAX))
    }

    fn sync(&mut self, unexpected_cnt: u32) -> Result<(), BtlError> {
        let m = self.module.as_mut().ok_or(BtlError::Finalized)?;
        m.tm_sync(unexpected_cnt).map_err(|e| btl_err(e, u32::MAX))
    }

    fn take_events(&mut self, out: &mut Vec<TagEvent>) {
        let list = self.caps();
        let Some(module) = self.module.as_mut() else {
            return;
        };
        let mut t = Translate {
            st: &mut self.tags,
            module,
            list: list.is_some(),
            max_tags: list.map_or(0, |c| c.max_tags as usize),
            out,
        };
        // Drained in place: the buffer keeps its capacity for the next
        // progress round.
        for ev in self.events.drain(..) {
            t.event(ev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_app_ctx_carries_the_header_length_and_is_told_from_others() {
        for n in [0usize, 1, 20, 64, 0xFFFF] {
            let a = eager_app_ctx(n).expect("a header length that fits");
            assert_eq!(eager_header_len(a), Some(n));
        }
        assert_eq!(eager_app_ctx(0x1_0000), None);
        // Not eager: the pml's BTL tag (generic fragments), the old eager
        // mark, small rendezvous ids, a neighbouring mark.
        for a in [0x41, 0, 7, 0x4540_FFFF, 0x4542_0000, u32::MAX] {
            assert_eq!(eager_header_len(a), None, "{a:#x}");
        }
    }
}
