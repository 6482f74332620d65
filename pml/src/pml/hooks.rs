//! Progress hooks: another layer's work that the pml's waiting calls keep
//! moving (MPI's progress rule), and what a waiting loop does between two
//! polling rounds.

use super::{lock_plain, Pml};

/// Work of a layer above the pml that must advance while a thread waits
/// in a blocking point-to-point call (MPI's progress rule): the coll
/// framework's non-blocking collectives, whose next round a rank blocked
/// in `MPI_Recv` may owe to the very peer it waits for.
pub(super) struct ProgressHook {
    /// Non-zero while there may be work (read every waiting round).
    pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    run: Box<dyn Fn() + Send + Sync>,
}

thread_local! {
    /// This thread is running the progress hook (a blocking call made from
    /// inside it does not run it again).
    static IN_HOOK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Pml {
    /// Registers the work that every waiting round of a blocking call
    /// (receive, send, wait, probe, ...) runs while `pending` is non-zero,
    /// with the pml's lock released: `run` may call into the pml. The
    /// process's coll framework registers one per context; every hook
    /// registered runs (the first is checked without a lock, later ones
    /// under a short one). A blocking call made from inside a hook does not
    /// run hooks again. Always `true`.
    pub fn set_progress_hook(
        &self,
        pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        run: Box<dyn Fn() + Send + Sync>,
    ) -> bool {
        let mut hook = Some(ProgressHook { pending, run });
        self.hook.get_or_init(|| hook.take().expect("taken once"));
        if let Some(h) = hook {
            lock_plain(&self.more).push(std::sync::Arc::new(h));
            self.more_hooks
                .store(true, std::sync::atomic::Ordering::Release);
        }
        true
    }

    /// The first hook, when it has work.
    #[inline]
    fn hook_pending(&self) -> Option<&ProgressHook> {
        self.hook
            .get()
            .filter(|h| h.pending.load(std::sync::atomic::Ordering::Acquire) != 0)
    }

    /// Whether some hook may have work (the caller then releases the lock
    /// and calls [`Pml::idle`]).
    #[inline]
    pub(super) fn hooks_pending(&self) -> bool {
        self.hook_pending().is_some() || self.more_hooks.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs the progress hooks that have work ([`Pml::set_progress_hook`]),
    /// for a layer whose own waiting loop does not go through the pml's
    /// (coll's blocking collectives poll shared memory and call
    /// [`Pml::progress`]): one-sided requests a rank must serve as a
    /// target then still move while it waits in `MPI_Barrier`. The caller
    /// holds no pml lock; a call from inside a hook does nothing.
    #[inline]
    pub fn run_progress_hooks(&self) {
        if let Some(h) = self.hook_pending() {
            Pml::run_hook(h);
        }
        if self.more_hooks.load(std::sync::atomic::Ordering::Acquire) {
            self.run_more_hooks();
        }
    }

    /// Runs the later hooks that have work (the caller holds no pml lock).
    #[cold]
    #[inline(never)]
    fn run_more_hooks(&self) {
        let busy: Vec<std::sync::Arc<ProgressHook>> = lock_plain(&self.more)
            .iter()
            .filter(|h| h.pending.load(std::sync::atomic::Ordering::Acquire) != 0)
            .cloned()
            .collect();
        for h in &busy {
            Pml::run_hook(h);
        }
    }

    /// Runs the hook (the caller holds no pml lock).
    #[cold]
    #[inline(never)]
    fn run_hook(h: &ProgressHook) {
        if IN_HOOK.with(|c| c.replace(true)) {
            return;
        }
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_HOOK.with(|c| c.set(false));
            }
        }
        let _reset = Reset;
        (h.run)();
    }

    /// Between two polling rounds of a waiting call (the lock is released).
    /// Spinning rounds carry no `spin_loop` hint: on AMD EPYC the `pause` it
    /// emits is long enough to delay noticing the peer's message in a small
    /// ping-pong (docs/journal/pml-performance.md); ranks that share a core
    /// yield instead (`mpi_yield_when_idle`). First runs the progress hook
    /// when it has work ([`Pml::set_progress_hook`]): the caller holds no
    /// pml lock.
    #[inline]
    pub(super) fn idle(&self) {
        self.run_progress_hooks();
        self.idle_locked();
    }

    /// [`Pml::idle`] for a caller holding the pml's lock: yields only.
    #[inline]
    pub(super) fn idle_locked(&self) {
        if self.yield_when_idle {
            std::thread::yield_now();
        }
    }
}
