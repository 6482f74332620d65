//! Gives libmpi.so the soname `libmpi.so.0` (the install prefix names it so).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.0");
}
