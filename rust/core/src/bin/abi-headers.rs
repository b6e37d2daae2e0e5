//! Writes the C headers and Cython declarations that `pyclassify_core::abi` generates from the
//! Rust records into `native/` of the repository (or of the directory given as the argument).
//! `cargo test` fails while the committed files differ from what this writes.

fn main() {
    let root = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    for (path, text) in pyclassify_core::abi::headers::files() {
        let target = root.join(path);
        let old = std::fs::read_to_string(&target).unwrap_or_default();
        if old == text {
            println!("{path}: unchanged");
        } else {
            std::fs::write(&target, text).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
            println!("{path}: written");
        }
    }
}
