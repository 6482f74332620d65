//! The end of the pml: finalize (drain, the `pml_stats` lines, then the
//! runtime's fence and shutdown in `crate::init`) and abandon (a panic is
//! unwinding).

use crate::PmlError;

use super::{lock_plain, Pml};

impl Pml {
    /// Finalize: completes outstanding traffic, fences with every peer so
    /// that nobody still needs this process, and shuts down the BTLs and
    /// PMI. Called by drop if not called explicitly.
    pub fn finalize(&self) -> Result<(), PmlError> {
        let rt = lock_plain(&self.rt).take();
        // Drain actions we still owe (FINs, ACKs, queued eager data), then
        // the BYEs that tell peers nothing more comes from us (once: a
        // second finalize, from drop, has no runtime left), until the BTLs
        // put them on the wire: a BYE to a peer not connected yet waits
        // for its connection, which the peer accepts while it finalizes
        // too, before anyone leaves the fence; and (jobs where everyone
        // tells everyone) until every live peer's BYE arrived.
        let mut bye = rt.is_some();
        loop {
            let mut g = self.lock();
            g.progress();
            if g.pending.is_empty()
                && !g.core.has_actions()
                && !g.net.sends_pending()
                && (bye || rt.is_none() || g.core.byes_complete())
            {
                if !bye {
                    break;
                }
                bye = false;
                g.say_bye();
                g.flush();
                continue;
            }
            drop(g);
            self.idle();
        }
        // Printed once: by the first finalize (a second, from drop, has no
        // runtime left).
        if self.stats && rt.is_some() {
            let (s, m) = {
                let g = self.lock();
                (g.core.stats(), g.core.match_counters())
            };
            // One line per rank, exactly this form (docs/pml.md). The
            // three lines go out in one write: stderr is unbuffered and
            // `eprintln!` writes piecewise, so lines of ranks sharing one
            // stream (Hydra forwards them into one) would interleave.
            let text = format!(
                "[rank {me}] pml_ob1 stats: {s}\npml_stats rank={me} {m}\n{}\n",
                self.peers_line(),
                me = self.me
            );
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
        let Some(rt) = rt else { return Ok(()) };
        crate::init::finish(rt, self)
    }

    /// Gives up without finalizing (a panic is unwinding): no fence, no
    /// PMI finalize, so the launcher sees a rank exit without finalize and
    /// ends the job instead of everyone hanging in the finalize fence.
    pub fn abandon(&self) {
        let rt = lock_plain(&self.rt).take();
        if rt.is_some() {
            tracing::error!(target: "pml_ob1", rank = self.me, "abandoning MPI without finalize");
        }
        self.lock().net.finalize();
        drop(rt);
    }

    /// Progress while `f` (a fence in another layer) runs elsewhere: used by
    /// finalize so that peers still pulling from us get answers.
    pub(crate) fn progress_until(&self, done: &std::sync::atomic::AtomicBool) {
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            self.progress();
            std::thread::yield_now();
        }
    }
}
