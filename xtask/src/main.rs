//! `cargo xtask install --prefix DIR [--release]`: builds libmpi (tmpi-capi),
//! tmpirun and tmpi_info, and lays out an MPI install prefix:
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

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::{env, fs};

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
            let mut release = false;
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--prefix" => prefix = it.next().cloned(),
                    "--release" => release = true,
                    s if s.starts_with("--prefix=") => prefix = Some(s["--prefix=".len()..].into()),
                    other => return Err(format!("unknown argument {other:?}")),
                }
            }
            let prefix = prefix.ok_or("install needs --prefix DIR")?;
            install(&absolute(Path::new(&prefix))?, release)
        }
        _ => Err("usage: cargo xtask install --prefix DIR [--release]".into()),
    }
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(env::current_dir().map_err(|e| e.to_string())?.join(p))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap_or(Path::new(".")).to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

const SONAME: &str = "libmpi.so.0";

fn install(prefix: &Path, release: bool) -> Result<(), String> {
    let root = workspace_root();
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root).args(["build", "-p", "tmpi-capi", "-p", "tmpi-run"]);
    if release {
        cmd.arg("--release");
    }
    // capi/build.rs gives libmpi.so its soname (libmpi.so.0).
    let st = cmd.status().map_err(|e| format!("running cargo: {e}"))?;
    if !st.success() {
        return Err("cargo build failed".into());
    }
    let out = target_dir(&root).join(if release { "release" } else { "debug" });
    for d in ["bin", "include", "lib/pkgconfig", "etc"] {
        fs::create_dir_all(prefix.join(d)).map_err(|e| format!("creating {d}: {e}"))?;
    }
    let copy = |from: PathBuf, to: PathBuf| -> Result<(), String> {
        let _ = fs::remove_file(&to);
        fs::copy(&from, &to).map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
        Ok(())
    };
    copy(out.join("libmpi.so"), prefix.join("lib").join(SONAME))?;
    symlink(SONAME, &prefix.join("lib/libmpi.so"))?;
    copy(out.join("libmpi.a"), prefix.join("lib/libmpi.a"))?;
    copy(root.join("capi/include/mpi.h"), prefix.join("include/mpi.h"))?;
    copy(out.join("tmpirun"), prefix.join("bin/tmpirun"))?;
    copy(out.join("tmpi_info"), prefix.join("bin/tmpi_info"))?;
    symlink("tmpirun", &prefix.join("bin/mpirun"))?;
    symlink("tmpirun", &prefix.join("bin/mpiexec"))?;
    write_exec(&prefix.join("bin/mpicc"), &wrapper(prefix, "${TMPI_CC:-cc}"))?;
    write_exec(&prefix.join("bin/mpicxx"), &wrapper(prefix, "${TMPI_CXX:-c++}"))?;
    let pc = format!(
        "prefix={p}\nexec_prefix=${{prefix}}\nlibdir=${{prefix}}/lib\nincludedir=${{prefix}}/include\n\n\
         Name: tmpi\nDescription: tmpi MPI library (MPI 3.1 C interface)\nVersion: {v}\n\
         Cflags: -I${{includedir}}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lmpi\nLibs.private: -lpthread -ldl -lm\n",
        p = prefix.display(),
        v = env!("CARGO_PKG_VERSION")
    );
    fs::write(prefix.join("lib/pkgconfig/tmpi.pc"), pc).map_err(|e| e.to_string())?;
    let conf = prefix.join("etc/tmpi-mca-params.conf");
    if !conf.exists() {
        fs::write(&conf, "# tmpi MCA parameters for every job of this installation: name = value\n# mpi_param_check = 1\n")
            .map_err(|e| e.to_string())?;
    }
    println!("installed tmpi into {}", prefix.display());
    Ok(())
}

fn symlink(target: &str, link: &Path) -> Result<(), String> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("symlink {}: {e}", link.display()))
}

fn write_exec(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

/// The compiler wrapper (POSIX sh).
fn wrapper(prefix: &Path, compiler: &str) -> String {
    format!(
        r#"#!/bin/sh
# tmpi compiler wrapper: adds tmpi's include and link flags.
prefix="{p}"
cc="{compiler}"
cflags="-I$prefix/include"
libs="-L$prefix/lib -Wl,-rpath,$prefix/lib -lmpi"
link=1
for a in "$@"; do
  case "$a" in
    -c|-E|-S|-M|-MM) link=0 ;;
  esac
done
case "$1" in
  -show|-showme|--showme)
    shift
    if [ $link -eq 1 ]; then echo $cc $cflags "$@" $libs; else echo $cc $cflags "$@"; fi
    exit 0 ;;
  --showme:compile) echo $cflags; exit 0 ;;
  --showme:link) echo $libs; exit 0 ;;
  --showme:incdirs) echo "$prefix/include"; exit 0 ;;
  --showme:libdirs) echo "$prefix/lib"; exit 0 ;;
  --showme:version|-v|--version) echo "tmpi mpicc {v} (MPI 3.1)"; $cc --version; exit $? ;;
esac
if [ $# -eq 0 ]; then echo "usage: $0 [compiler arguments] (-show prints the command)" >&2; exit 1; fi
if [ $link -eq 1 ]; then exec $cc $cflags "$@" $libs; else exec $cc $cflags "$@"; fi
"#,
        p = prefix.display(),
        v = env!("CARGO_PKG_VERSION")
    )
}
