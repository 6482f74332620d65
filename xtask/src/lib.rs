//! The install layout of tmpi (used by `cargo xtask install` and by the
//! C test suite of tmpi-capi, which lays out a prefix from the artifacts
//! cargo just built).

use std::fs;
use std::path::{Path, PathBuf};

const SONAME: &str = "libmpi.so.0";

/// Lays out an install prefix at `prefix` from the build outputs in `out`
/// (`target/debug` or `target/release`) and the sources at `root`.
pub fn layout(prefix: &Path, out: &Path, root: &Path) -> Result<(), String> {
    for d in ["bin", "include", "lib/pkgconfig", "etc"] {
        fs::create_dir_all(prefix.join(d)).map_err(|e| format!("creating {d}: {e}"))?;
    }
    let copy = |from: PathBuf, to: PathBuf| -> Result<(), String> {
        let _ = fs::remove_file(&to);
        fs::copy(&from, &to)
            .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
        Ok(())
    };
    copy(out.join("libmpi.so"), prefix.join("lib").join(SONAME))?;
    symlink(SONAME, &prefix.join("lib/libmpi.so"))?;
    copy(out.join("libmpi.a"), prefix.join("lib/libmpi.a"))?;
    copy(
        root.join("capi/include/mpi.h"),
        prefix.join("include/mpi.h"),
    )?;
    copy(out.join("tmpirun"), prefix.join("bin/tmpirun"))?;
    copy(out.join("tmpi_info"), prefix.join("bin/tmpi_info"))?;
    symlink("tmpirun", &prefix.join("bin/mpirun"))?;
    symlink("tmpirun", &prefix.join("bin/mpiexec"))?;
    write_exec(
        &prefix.join("bin/mpicc"),
        &wrapper(prefix, "${TMPI_CC:-cc}"),
    )?;
    write_exec(
        &prefix.join("bin/mpicxx"),
        &wrapper(prefix, "${TMPI_CXX:-c++}"),
    )?;
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
    Ok(())
}

pub fn symlink(target: &str, link: &Path) -> Result<(), String> {
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
