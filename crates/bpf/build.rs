//! Compiles `src/xdp_redirect.c` into `$OUT_DIR/xdp_redirect.o` with clang.
//! No prebuilt object is kept in git.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let src = "src/xdp_redirect.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("xdp_redirect.o");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());

    if Command::new(&clang).arg("--version").output().is_err() {
        panic!(
            "bpf: `{clang}` not found. The XDP program is compiled from C at build time; \
             install clang (Debian: `apt-get install clang llvm`) or set CLANG=/path/to/clang."
        );
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        panic!(
            "bpf: /usr/include/bpf/bpf_helpers.h not found. Install the libbpf headers \
             (Debian: `apt-get install libbpf-dev`)."
        );
    }

    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-c", src, "-o"]).arg(&out);
    // <linux/bpf.h> pulls in <asm/types.h>, which Debian keeps under the
    // multiarch directory that `-target bpf` does not search.
    for dir in multiarch_include_dirs() {
        cmd.arg("-idirafter").arg(dir);
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("bpf: running {clang}: {e}"));
    if !status.success() {
        panic!(
            "bpf: {clang} failed to compile {src} ({status}). If the error is a missing \
             <asm/types.h> or <linux/bpf.h>, install linux-libc-dev (and libbpf-dev)."
        );
    }
}

fn multiarch_include_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let triple = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "riscv64" => "riscv64-linux-gnu",
        _ => "",
    };
    if !triple.is_empty() {
        let d = PathBuf::from("/usr/include").join(triple);
        if d.exists() {
            dirs.push(d);
        }
    }
    dirs
}
