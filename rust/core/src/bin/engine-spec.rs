//! Writes `pyclassify/engine_spec.py`, the engine spec's TypedDicts that
//! `pyclassify_core::engine::spec_py` generates from the Rust types, into the repository (or the
//! directory given as the argument). `cargo test` fails while the committed file differs.

fn main() {
    let root = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let path = pyclassify_core::engine::spec_py::PATH;
    let text = pyclassify_core::engine::spec_py::python_types();
    let target = root.join(path);
    if std::fs::read_to_string(&target).unwrap_or_default() == text {
        println!("{path}: unchanged");
    } else {
        std::fs::write(&target, text).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
        println!("{path}: written");
    }
}
