//! Gives libmpi.so the soname `libmpi.so.0` (the install prefix names it
//! so) and compiles the C kernels of the reductions on long double and the
//! C complex types (`c/wide_ops.c`).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.0");
    println!("cargo:rerun-if-changed=c/wide_ops.c");
    cc::Build::new()
        .file("c/wide_ops.c")
        .flag_if_supported("-std=c11")
        .warnings(true)
        .compile("tmpi_wide_ops");
}
