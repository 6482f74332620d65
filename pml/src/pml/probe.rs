//! Probes: `MPI_Iprobe`/`MPI_Probe`, and the matched probes
//! (`MPI_Improbe`/`MPI_Mprobe`) with the receive of the message they took
//! (`MPI_Imrecv`).

use crate::raw::RawBufMut;
use crate::request::{MessageId, ReqId, Status};
use crate::PmlError;

use super::inner::NetWire;
use super::{check_recv_tag, Inner, Pml};

impl Pml {
    /// `MPI_Iprobe`.
    pub fn iprobe(&self, ctx: u32, src: i32, tag: i32) -> Result<Option<Status>, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        if let Some(s) = g.core.iprobe(ctx, src, tag)? {
            return Ok(Some(s));
        }
        g.progress();
        g.core.iprobe(ctx, src, tag)
    }

    /// `MPI_Probe`.
    pub fn probe(&self, ctx: u32, src: i32, tag: i32) -> Result<Status, PmlError> {
        loop {
            if let Some(s) = self.iprobe(ctx, src, tag)? {
                return Ok(s);
            }
            self.idle();
        }
    }

    /// `MPI_Improbe`: a message handle for [`Pml::imrecv`] and its status.
    pub fn improbe(
        &self,
        ctx: u32,
        src: i32,
        tag: i32,
    ) -> Result<Option<(MessageId, Status)>, PmlError> {
        check_recv_tag(tag)?;
        let mut g = self.lock();
        for round in 0..2 {
            if let Some((msg, env, st)) = g.core.improbe(ctx, src, tag)? {
                g.mprobed.insert(msg, env);
                return Ok(Some((MessageId(msg), st)));
            }
            if round == 0 {
                g.progress();
            }
        }
        Ok(None)
    }

    /// `MPI_Mprobe`.
    pub fn mprobe(&self, ctx: u32, src: i32, tag: i32) -> Result<(MessageId, Status), PmlError> {
        loop {
            if let Some(r) = self.improbe(ctx, src, tag)? {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Imrecv`.
    ///
    /// # Safety
    /// As [`Pml::irecv`].
    pub unsafe fn imrecv(&self, msg: MessageId, buf: RawBufMut) -> Result<ReqId, PmlError> {
        let mut g = self.lock();
        let env = g
            .mprobed
            .remove(&msg.0)
            .ok_or_else(|| PmlError::Arg("unknown or already received message".into()))?;
        let Inner {
            core, net, limits, ..
        } = &mut *g;
        let mut w = NetWire {
            net: &mut **net,
            limits,
        };
        // SAFETY: forwarded contract.
        let id = unsafe { core.imrecv(&mut w, msg.0, env, buf) }?;
        g.flush();
        Ok(id)
    }
}
