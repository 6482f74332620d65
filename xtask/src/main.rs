//! `cargo xtask install --prefix DIR [--debug]`: builds libmpi (tmpi-capi),
//! tmpirun and tmpi_info with the release profile (optimised, fat LTO; what
//! users run and benchmarks measure), or with the dev profile for `--debug`
//! (quicker to build, debug assertions on), and lays out an MPI install
//! prefix:
//!
//! ```text
//! bin/      mpicc mpicxx (wrappers), mpirun mpiexec (-> tmpirun), tmpirun, tmpi_info
//! include/  mpi.h
//! lib/      libmpi.so.0 (soname) + libmpi.so, libmpi.a, pkgconfig/tmpi.pc
//! etc/      tmpi-mca-params.conf
//! ```
//! The wrappers print their full command line with `-show`/`-showme`,
//! `--showme:compile`, `--showme:link`; the link line carries an rpath so
//! programs run without `LD_LIBRARY_PATH`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("install") => {
            let mut prefix = None;
            let mut release = true;
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--prefix" => prefix = it.next().cloned(),
                    "--debug" => release = false,
                    // The default; accepted so that older command lines work.
                    "--release" => release = true,
                    s if s.starts_with("--prefix=") => prefix = Some(s["--prefix=".len()..].into()),
                    other => return Err(format!("unknown argument {other:?}")),
                }
            }
            let prefix = prefix.ok_or("install needs --prefix DIR")?;
            install(&absolute(Path::new(&prefix))?, release)
        }
        _ => Err("usage: cargo xtask install --prefix DIR [--debug]".into()),
    }
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(env::current_dir().map_err(|e| e.to_string())?.join(p))
}

/// The workspace this xtask runs for: `cargo run` (the `cargo xtask`
/// alias) sets `CARGO_MANIFEST_DIR` at run time. The path baked in at
/// compile time is only the fallback: with a shared `CARGO_TARGET_DIR`,
/// cargo may reuse an xtask binary built from another checkout, which then
/// installed that checkout's code.
fn workspace_root() -> PathBuf {
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().unwrap_or(Path::new(".")).to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

fn install(prefix: &Path, release: bool) -> Result<(), String> {
    let root = workspace_root();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root)
        .args(["build", "-p", "tmpi-capi", "-p", "tmpi-run"]);
    if release {
        cmd.arg("--release");
    }
    // capi/build.rs gives libmpi.so its soname (libmpi.so.0).
    let st = cmd.status().map_err(|e| format!("running cargo: {e}"))?;
    if !st.success() {
        return Err("cargo build failed".into());
    }
    let out = target_dir(&root).join(if release { "release" } else { "debug" });
    xtask::layout(prefix, &out, &root)?;
    println!("installed tmpi into {}", prefix.display());
    Ok(())
}
