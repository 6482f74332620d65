//! The tag-matching list operations on the TM-SRQ (ADD, DEL, SYNC with
//! the caller's unexpected count), bounded by the list's operations;
//! `crate::tm` and `crate::tag_offload` build on them.

use super::*;

impl<P: Provider> Module<P> {
    pub(crate) fn tm_check(&self, n_ops: u32) -> Result<()> {
        if self.tm.is_none() {
            return Err(OpenibError::NoTagMatching);
        }
        if self.tm_ops_out + n_ops > self.tm_max_ops {
            return Err(OpenibError::Busy);
        }
        Ok(())
    }

    pub(crate) fn tm_post(&mut self, op: &mut OpsWr<'_>) -> Result<()> {
        let mut ops = [*op];
        // SAFETY: callers uphold `post_srq_ops`'s contract (ADD buffers are
        // registered on this PD, pinned by `Tagged::reg`, and owned by the NIC
        // until their completion).
        let r = unsafe { self.srq.post_srq_ops(&mut ops) };
        match r {
            Ok(()) => {
                *op = ops[0];
                self.tm_ops_out += 1;
                Ok(())
            }
            Err(e) if e.is_full() => Err(OpenibError::Busy),
            Err(e) => Err(e.into()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn tm_add(
        &mut self,
        reg: Reg<P>,
        offset: u64,
        len: u32,
        tag: u64,
        mask: u64,
        recv_id: u64,
        unexpected_cnt: u32,
    ) -> Result<u32> {
        if recv_id > MAX_RECV_ID {
            return Err(OpenibError::InvalidArgument(format!(
                "receive id {recv_id} above 2^56-1"
            )));
        }
        if self.tagged.contains_key(&recv_id) {
            return Err(OpenibError::InvalidArgument(format!(
                "receive id {recv_id} already posted"
            )));
        }
        self.tm_check(1)?;
        let sge = [reg.sge(offset, len)?];
        let mut op = OpsWr::add(
            wr(K_TM_ADD, recv_id),
            wr(K_TAGGED, recv_id),
            &sge,
            tag & mask,
            mask,
        )
        .with_sync(unexpected_cnt);
        self.tm_post(&mut op)?;
        self.tagged.insert(
            recv_id,
            Tagged {
                reg,
                matched: None,
                sw_rndv: false,
            },
        );
        Ok(op.handle)
    }

    pub(crate) fn tm_del_inner(
        &mut self,
        handle: u32,
        recv_id: u64,
        unexpected_cnt: u32,
    ) -> Result<()> {
        if !self.tagged.contains_key(&recv_id) {
            return Err(OpenibError::InvalidArgument(format!(
                "receive id {recv_id} is not posted"
            )));
        }
        self.tm_check(1)?;
        let mut op = OpsWr::del(wr(K_TM_DEL, recv_id), handle).with_sync(unexpected_cnt);
        self.tm_post(&mut op)
    }

    pub(crate) fn tm_sync_inner(&mut self, unexpected_cnt: u32) -> Result<()> {
        self.tm_check(1)?;
        let mut op = OpsWr::sync(wr(K_TM_SYNC, 0), unexpected_cnt);
        self.tm_post(&mut op)
    }

    pub(crate) fn tm_unexpected(&self) -> u32 {
        self.sw_unexpected
    }
}
