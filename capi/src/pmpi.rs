//! The MPI profiling interface: every `MPI_X` of `mpi.h` has a `PMPI_X`
//! entry, so that tools (mpiP, Score-P, Darshan, a test's own wrapper) can
//! define `MPI_X` themselves, do their work and call `PMPI_X`, which runs
//! tmpi's `MPI_X`.
//!
//! Each `PMPI_X` is a one-instruction trampoline, a tail jump to `MPI_X`
//! with the caller's registers and stack untouched, so it needs no copy of
//! the function's signature and cannot drift from it. The names come from
//! `mpi.h` (build.rs writes the list). libmpi.so is linked with
//! `-Bsymbolic-functions` (build.rs), so the jump binds to tmpi's own
//! `MPI_X` even when a tool's `MPI_X` interposes it for the application;
//! without that the tool's `PMPI_X` call would come back to the tool.
//! x86-64 (`jmp`) and AArch64 (`b`); on other architectures there are no
//! `PMPI_` symbols yet.

#[cfg(target_arch = "x86_64")]
macro_rules! trampolines {
    ($($pmpi:ident $target:literal)*) => {$(
        #[doc = concat!("Profiling entry of `", $target, "`: jumps to it.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $pmpi() {
            // SAFETY: a naked function of one tail jump: the arguments and
            // the return address the caller set up are passed on as they
            // are to the function of the same signature (`mpi.h` declares
            // `PMPI_X` with `MPI_X`'s prototype), whose return goes
            // straight back to the caller. Nothing touches the stack.
            core::arch::naked_asm!(concat!("jmp ", $target, "@PLT"))
        }
    )*};
}

#[cfg(target_arch = "aarch64")]
macro_rules! trampolines {
    ($($pmpi:ident $target:literal)*) => {$(
        #[doc = concat!("Profiling entry of `", $target, "`: branches to it.")]
        #[unsafe(naked)]
        #[no_mangle]
        pub extern "C" fn $pmpi() {
            // SAFETY: a naked function of one tail branch (`b`, which
            // leaves the link register x30 as the caller set it): the
            // arguments in x0-x7/v0-v7 and on the stack are passed on as
            // they are to the function of the same signature (`mpi.h`
            // declares `PMPI_X` with `MPI_X`'s prototype), whose `ret`
            // goes straight back to the caller. The linker routes the
            // branch through a PLT stub if the target is out of range or
            // preemptible; such a stub only clobbers x16/x17, which the
            // AAPCS64 reserves for exactly that. Nothing touches the stack.
            core::arch::naked_asm!(concat!("b ", $target))
        }
    )*};
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
include!(concat!(env!("OUT_DIR"), "/pmpi_names.rs"));
