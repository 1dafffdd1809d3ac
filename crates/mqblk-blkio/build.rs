//! Gives the shared library libblkio's SONAME and writes a pkg-config file
//! (blkio.pc) and the libblkio.so.1 link beside the library in target/.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=include/blkio.h");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libblkio.so.1");

    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out: the library
    // lands in <target>/<profile>.
    let Some(libdir) = out_dir.ancestors().nth(3).map(PathBuf::from) else { return };
    let includedir = manifest_dir.join("include");
    let version = std::env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let pc = format!(
        "libdir={}\nincludedir={}\n\nName: blkio\nDescription: libblkio's C API over mqblk block devices\n\
         Version: {version}\nLibs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lblkio\nCflags: -I${{includedir}}\n",
        libdir.display(),
        includedir.display()
    );
    let pc_dir = libdir.join("pkgconfig");
    std::fs::create_dir_all(&pc_dir).expect("create pkgconfig dir");
    std::fs::write(pc_dir.join("blkio.pc"), pc).expect("write blkio.pc");
    // Programs linked with -lblkio record the SONAME, libblkio.so.1: give
    // the loader that name next to libblkio.so (dangling until it is linked).
    let link = libdir.join("libblkio.so.1");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink("libblkio.so", &link).expect("symlink libblkio.so.1");
    }
}
