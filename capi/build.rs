//! Gives libmpi.so the soname `libmpi.so.0` (the install prefix names it
//! so) and compiles the C kernels of the reductions on long double and the
//! C complex types (`c/wide_ops.c`), links it with
//! `-Bsymbolic-functions` and lists the functions of `include/mpi.h` for
//! the profiling interface's `PMPI_` entries (`src/pmpi.rs`).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.0");
    // The profiling interface's PMPI_X jump to this library's MPI_X, not
    // to a tool's MPI_X that interposes it (src/pmpi.rs).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
    pmpi_names();
    println!("cargo:rerun-if-changed=c/wide_ops.c");
    cc::Build::new()
        .file("c/wide_ops.c")
        .flag_if_supported("-std=c11")
        .warnings(true)
        .compile("tmpi_wide_ops");
}

/// Writes `$OUT_DIR/pmpi_names.rs`: `trampolines! { PMPI_X "MPI_X" ... }`
/// for every function `include/mpi.h` declares (a line starting with a
/// return type and `MPI_X(`).
fn pmpi_names() {
    println!("cargo:rerun-if-changed=include/mpi.h");
    let header = std::fs::read_to_string("include/mpi.h").expect("read include/mpi.h");
    let mut names: Vec<&str> = header
        .lines()
        .filter_map(|l| {
            let (head, _) = l.split_once('(')?;
            let mut words = head.split_whitespace();
            let ret = words.next()?;
            let name = words.next()?.trim_start_matches('*');
            let is_type = ret == "int" || ret == "double" || ret.starts_with("MPI_");
            (is_type && words.next().is_none() && name.starts_with("MPI_")).then_some(name)
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut out = String::from("trampolines! {\n");
    for n in names {
        out.push_str(&format!("    P{n} \"{n}\"\n"));
    }
    out.push_str("}\n");
    let dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(format!("{dir}/pmpi_names.rs"), out).expect("write pmpi_names.rs");
}
