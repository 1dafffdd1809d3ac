//! The C tests (tests/c/*.c): each is compiled with the system `cc`
//! against blkio.h and libblkio.so through pkg-config's blkio.pc, run, and
//! must exit 0 after printing its PASS line; each is also compiled and run
//! once more under AddressSanitizer.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the library (a no-op when fresh) and returns the directory
/// holding libblkio.so and pkgconfig/blkio.pc.
fn libdir() -> &'static Path {
    static LIBDIR: OnceLock<PathBuf> = OnceLock::new();
    LIBDIR.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "mqblk-blkio"])
            .current_dir(manifest_dir())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p mqblk-blkio failed");
        // CARGO_TARGET_TMPDIR is <target>/tmp; the library is in <target>/debug.
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").to_path_buf();
        let dir = target.join("debug");
        assert!(dir.join("libblkio.so").exists(), "no libblkio.so in {}", dir.display());
        assert!(dir.join("pkgconfig/blkio.pc").exists(), "no blkio.pc in {}/pkgconfig", dir.display());
        dir
    })
}

/// `pkg-config --cflags --libs blkio` with our blkio.pc first in the path.
fn pkg_config_flags() -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "blkio"])
        .env("PKG_CONFIG_PATH", libdir().join("pkgconfig"))
        .output()
        .expect("run pkg-config (install pkg-config or pkgconf)");
    assert!(out.status.success(), "pkg-config blkio: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8").split_whitespace().map(String::from).collect()
}

fn compile_and_run(name: &str, asan: bool) {
    let src = manifest_dir().join("tests/c").join(format!("{name}.c"));
    let suffix = if asan { "-asan" } else { "" };
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("blkio-{name}{suffix}"));
    let mut cc = Command::new("cc");
    cc.args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]);
    if asan {
        cc.args(["-fsanitize=address", "-fno-omit-frame-pointer"]);
    }
    cc.arg(&src).arg("-o").arg(&exe).args(pkg_config_flags());
    let out = cc.output().expect("run cc");
    assert!(out.status.success(), "cc {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));

    let out = Command::new(&exe).output().expect("run the C test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}{suffix} failed ({}):\n{stdout}\n{stderr}", out.status);
    let pass = format!("PASS {}", src.display());
    assert!(stdout.contains(&pass), "{name}{suffix} did not report its pass line:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
}

macro_rules! c_test {
    ($name:ident) => {
        mod $name {
            #[test]
            fn plain() {
                super::compile_and_run(stringify!($name), false);
            }

            #[test]
            fn address_sanitizer() {
                super::compile_and_run(stringify!($name), true);
            }
        }
    };
}

c_test!(lifecycle);
c_test!(io);
c_test!(vectored);
c_test!(events);
c_test!(zoned);
c_test!(file);
c_test!(threads);
