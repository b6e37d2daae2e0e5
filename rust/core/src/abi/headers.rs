//! The registry of shared records and the C headers and Cython declarations written from it.
//! This module reads the records (it imports their modules); they import only the mechanism in
//! [`super`], so the dependency runs one way.

use std::fmt::Write as _;

use super::{AbiRecord, Record, Ty};
use crate::batch::{OuterHeader, PacketHeader, ENCAP_KINDS, ERROR_KINDS, FLAGS, OUTER_HAS_KEY};
use crate::capi::{RevokedFlow, API_FUNCTIONS, CAPI_NULL, CAPI_OK, CAPI_PANIC, ENGINE_ABI_VERSION, ENGINE_CAPSULE};
use crate::conntrack::{QuotedTuple, QUOTED_VALID};
use crate::engine::{PacketVerdict, SideVerdict};
use crate::records::FlowCounts;

/// Every shared record, in dependency order (a nested record before its user).
pub const RECORDS: &[Record] = &[
    PacketHeader::RECORD,
    OuterHeader::RECORD,
    FlowCounts::RECORD,
    QuotedTuple::RECORD,
    SideVerdict::RECORD,
    PacketVerdict::RECORD,
    RevokedFlow::RECORD,
];

/// The record named `rust_name`.
pub fn record(rust_name: &str) -> Option<&'static Record> {
    RECORDS.iter().find(|r| r.rust_name == rust_name)
}

const GENERATED: &str = "Generated from the Rust engine by rust/core/src/abi/headers.rs: do not edit.\n\
Regenerate with `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`;\n\
`cargo test` fails while this file differs from what the generator writes.";

fn doc_line(doc: &[&str]) -> String {
    doc.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

fn c_struct(out: &mut String, r: &Record) {
    let _ = writeln!(out, "/* {}::{}: {} bytes, {}-aligned. */", r.module, r.rust_name, r.size, r.align);
    let _ = writeln!(out, "typedef struct {} {{", r.c_name);
    for f in r.fields {
        let decl = match f.ty {
            Ty::Bytes(n) => format!("{} {}[{n}];", f.ty.c(), f.name),
            _ => format!("{} {};", f.ty.c(), f.name),
        };
        let doc = doc_line(f.doc);
        if doc.is_empty() {
            let _ = writeln!(out, "    {decl:<24} /* {:>2} */", f.offset);
        } else {
            let _ = writeln!(out, "    {decl:<24} /* {:>2}: {doc} */", f.offset);
        }
    }
    let _ = writeln!(out, "}} {};\n", r.c_name);
}

fn c_asserts(out: &mut String, r: &Record) {
    let c = r.c_name;
    let _ = writeln!(out, "_Static_assert(sizeof({c}) == {}, \"{c} size\");", r.size);
    let _ = writeln!(out, "_Static_assert(_Alignof({c}) == {}, \"{c} alignment\");", r.align);
    for f in r.fields {
        let _ = writeln!(out, "_Static_assert(offsetof({c}, {}) == {}, \"{c}.{} offset\");", f.name, f.offset, f.name);
    }
    out.push('\n');
}

fn c_layout_table(out: &mut String, records: &[&Record], func: &str) {
    for r in records {
        let c = r.c_name;
        let _ = writeln!(out, "static const pc_field pc_fields_{c}[] = {{");
        for f in r.fields {
            let _ = writeln!(out, "    {{\"{0}\", offsetof({c}, {0}), sizeof((({c} *)0)->{0})}},", f.name);
        }
        let _ = writeln!(out, "}};");
    }
    let _ = writeln!(
        out,
        "\n/* The layouts of this header's records as the C compiler sees them; *n receives the count. */"
    );
    let _ = writeln!(out, "static inline const pc_record_layout *{func}(size_t *n) {{");
    let _ = writeln!(out, "    static const pc_record_layout records[] = {{");
    for r in records {
        let c = r.c_name;
        let _ =
            writeln!(out, "        {{\"{c}\", sizeof({c}), sizeof(pc_fields_{c}) / sizeof(pc_field), pc_fields_{c}}},");
    }
    let _ = writeln!(out, "    }};\n    *n = sizeof(records) / sizeof(records[0]);\n    return records;\n}}\n");
}

fn pxd_struct(out: &mut String, r: &Record) {
    let _ = writeln!(out, "    ctypedef struct {}:", r.c_name);
    for f in r.fields {
        match f.ty {
            Ty::Bytes(n) => {
                let _ = writeln!(out, "        {} {}[{n}]", f.ty.c(), f.name);
            }
            _ => {
                let _ = writeln!(out, "        {} {}", f.ty.c(), f.name);
            }
        }
    }
    out.push('\n');
}

fn header_batch_h() -> String {
    let mut o = String::new();
    let _ = writeln!(o, "/*\n * {}\n *", GENERATED.replace('\n', "\n * "));
    o.push_str(
        " * The header batch: one decoded packet per 64-byte PacketHeader (rust/core/src/batch.rs).\n\
         \x20* The decoder writes arrays of it; the engine reads them in place through the C ABI, without\n\
         \x20* the GIL; numpy sees them as pyclassify.batch.HEADER_DTYPE.\n\
         \x20*\n\
         \x20* Layout rules: 64 bytes (one cache line); no implicit padding (fields by decreasing alignment\n\
         \x20* tile the struct); integers in host byte order; addresses as raw network-order bytes with IPv4\n\
         \x20* stored IPv4-mapped (::ffff:a.b.c.d). A packet found inside a tunnel has its outer header in a\n\
         \x20* pc_outer beside it, in a parallel array.\n\
         \x20*/\n",
    );
    o.push_str("#ifndef PYCLASSIFY_HEADER_BATCH_H\n#define PYCLASSIFY_HEADER_BATCH_H\n\n");
    o.push_str("#include <stddef.h>\n#include <stdint.h>\n\n");
    o.push_str("/* Bits of PacketHeader.flags. */\n");
    for (name, bit, doc) in FLAGS {
        let _ = writeln!(o, "#define PC_{name} {bit}u /* {doc} */");
    }
    o.push_str("\n/* Values of PacketHeader.error_kind: why a packet was not (fully) decoded. Every kind but\n");
    o.push_str(" * PC_ERR_FRAGMENT_UNMATCHED also sets PC_FLAG_MALFORMED; the PC_ERR_TRUNCATED_* kinds also set\n");
    o.push_str(" * PC_FLAG_TRUNCATED. */\nenum pc_error_kind {\n");
    for (name, value, doc) in ERROR_KINDS {
        let _ = writeln!(o, "    PC_{name} = {value}, /* {doc} */");
    }
    let _ = writeln!(o, "    PC_ERR_COUNT = {}\n}};\n", ERROR_KINDS.len());
    o.push_str("/* Values of PacketHeader.encap and pc_outer.encap: the tunnel a packet was found in. */\nenum pc_encap_kind {\n");
    for (name, value, doc) in ENCAP_KINDS {
        let _ = writeln!(o, "    PC_{name} = {value}, /* {doc} */");
    }
    let _ = writeln!(o, "    PC_ENCAP_COUNT = {}\n}};\n", ENCAP_KINDS.len());
    let _ = writeln!(o, "/* pc_outer.flags: vni holds the VXLAN/Geneve VNI or the GRE key. */\n#define PC_OUTER_HAS_KEY {OUTER_HAS_KEY}u\n");
    o.push_str(
        "/* One field of a record as the C compiler lays it out, for the cross-layer ABI test. */\n\
         typedef struct pc_field {\n    const char *name;\n    size_t offset;\n    size_t size;\n} pc_field;\n\n\
         typedef struct pc_record_layout {\n    const char *name;\n    size_t size;\n    size_t nfields;\n    const pc_field *fields;\n} pc_record_layout;\n\n",
    );
    let r = &PacketHeader::RECORD;
    let outer = &OuterHeader::RECORD;
    c_struct(&mut o, r);
    c_struct(&mut o, outer);
    c_asserts(&mut o, r);
    c_asserts(&mut o, outer);
    o.push_str("/* A flow record's counts, parallel to the header it is judged as (rust/core/src/records). */\n");
    let counts = &FlowCounts::RECORD;
    c_struct(&mut o, counts);
    c_asserts(&mut o, counts);
    c_layout_table(&mut o, &[r, outer, counts], "pc_header_batch_layouts");
    o.push_str("/* Every field of PacketHeader in declaration order; *n receives the count. */\n");
    o.push_str("static inline const pc_field *pc_header_fields(size_t *n) {\n");
    o.push_str(
        "    *n = sizeof(pc_fields_PacketHeader) / sizeof(pc_field);\n    return pc_fields_PacketHeader;\n}\n\n",
    );
    o.push_str("#endif /* PYCLASSIFY_HEADER_BATCH_H */\n");
    o
}

fn header_batch_pxd() -> String {
    let mut o = String::new();
    o.push_str("# cython: language_level=3\n");
    for l in GENERATED.lines() {
        let _ = writeln!(o, "# {l}");
    }
    o.push_str("# Declarations of native/header_batch.h, the header batch shared with the Rust engine and numpy.\n");
    o.push_str("from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t\n\n\n");
    o.push_str("cdef extern from \"header_batch.h\" nogil:\n    enum:\n");
    for (name, _, _) in FLAGS {
        let _ = writeln!(o, "        PC_{name}");
    }
    o.push_str("        PC_OUTER_HAS_KEY\n");
    o.push('\n');
    pxd_struct(&mut o, &PacketHeader::RECORD);
    pxd_struct(&mut o, &OuterHeader::RECORD);
    pxd_struct(&mut o, &FlowCounts::RECORD);
    o.push_str(
        "    ctypedef struct pc_field:\n        const char *name\n        size_t offset\n        size_t size\n\n\
         \x20   ctypedef struct pc_record_layout:\n        const char *name\n        size_t size\n        size_t nfields\n        const pc_field *fields\n\n\
         \x20   const pc_field *pc_header_fields(size_t *n)\n\
         \x20   const pc_record_layout *pc_header_batch_layouts(size_t *n)\n\n",
    );
    o.push_str("    enum pc_error_kind:\n");
    for (name, _, _) in ERROR_KINDS {
        let _ = writeln!(o, "        PC_{name}");
    }
    o.push_str("        PC_ERR_COUNT\n\n    enum pc_encap_kind:\n");
    for (name, _, _) in ENCAP_KINDS {
        let _ = writeln!(o, "        PC_{name}");
    }
    o.push_str("        PC_ENCAP_COUNT\n");
    o
}

fn engine_api_records() -> [&'static Record; 4] {
    [&QuotedTuple::RECORD, &SideVerdict::RECORD, &PacketVerdict::RECORD, &RevokedFlow::RECORD]
}

fn engine_api_h() -> String {
    let mut o = String::new();
    let _ = writeln!(o, "/*\n * {}\n *", GENERATED.replace('\n', "\n * "));
    o.push_str(
        " * The Rust engine's C ABI (rust/core/src/capi.rs): the function table and engine handle that\n\
         \x20* `pyclassify._engine.Engine.capsule()` hands out in a PyCapsule. Native loops call it without\n\
         \x20* the GIL. Opaque types: the engine and the connection tracker are Rust objects, only ever\n\
         \x20* passed back.\n */\n",
    );
    o.push_str("#ifndef PYCLASSIFY_ENGINE_API_H\n#define PYCLASSIFY_ENGINE_API_H\n\n");
    o.push_str("#include <stddef.h>\n#include <stdint.h>\n#include <sys/types.h>\n\n#include \"header_batch.h\"\n\n");
    let _ = writeln!(o, "/* Bumped on any change to the table or the records it passes; EngineClient checks it. */");
    let _ = writeln!(o, "#define PC_ENGINE_ABI_VERSION {ENGINE_ABI_VERSION}");
    let _ = writeln!(o, "#define PC_ENGINE_CAPSULE \"{}\"\n", ENGINE_CAPSULE.to_str().expect("ascii"));
    let _ = writeln!(
        o,
        "#define PC_CAPI_OK {CAPI_OK}\n#define PC_CAPI_NULL ({CAPI_NULL})\n#define PC_CAPI_PANIC ({CAPI_PANIC})\n"
    );
    let _ = writeln!(o, "/* QuotedTuple.flags: the quoted header was decoded far enough to give the tuple. */");
    let _ = writeln!(o, "#define PC_QUOTE_VALID {QUOTED_VALID}u\n");
    let _ = writeln!(o, "/* pc_verdict.http codes (engine::records). */");
    let _ = writeln!(
        o,
        "#define PC_HTTP_AWAITS {}\n#define PC_HTTP_REQUEST {}\n#define PC_HTTP_TABLE_FULL {}\n#define PC_HTTP_ERROR {}\n",
        crate::engine::HTTP_AWAITS,
        crate::engine::HTTP_REQUEST,
        crate::engine::HTTP_TABLE_FULL,
        crate::engine::HTTP_ERROR
    );
    o.push_str("typedef struct pc_engine pc_engine;       /* Rust Engine */\n");
    o.push_str("typedef struct pc_conntrack pc_conntrack; /* Rust ConnTrack */\n");
    o.push_str("typedef struct pc_http pc_http;           /* Rust HttpConns */\n\n");
    for r in engine_api_records() {
        c_struct(&mut o, r);
    }
    o.push_str("/* The function table (capi::EngineApi). */\ntypedef struct pc_engine_api {\n");
    o.push_str("    uint32_t abi_version;\n    uint32_t header_size;\n    uint32_t verdict_size;\n    uint32_t quote_size;\n    uint32_t revoked_size;\n");
    for (name, ret, params, doc) in API_FUNCTIONS {
        let _ = writeln!(o, "    /* {doc} */\n    {ret} (*{name})({params});");
    }
    o.push_str("} pc_engine_api;\n\n");
    o.push_str("typedef struct pc_engine_ref {\n    const pc_engine_api *api;\n    const pc_engine *engine;\n} pc_engine_ref;\n\n");
    for r in engine_api_records() {
        c_asserts(&mut o, r);
    }
    let _ = writeln!(
        o,
        "_Static_assert(sizeof(pc_engine_api) == {}, \"pc_engine_api size\");\n",
        crate::capi::ENGINE_API_SIZE
    );
    c_layout_table(&mut o, &engine_api_records(), "pc_engine_api_layouts");
    o.push_str("#endif /* PYCLASSIFY_ENGINE_API_H */\n");
    o
}

fn engine_api_pxd() -> String {
    let mut o = String::new();
    o.push_str("# cython: language_level=3\n");
    for l in GENERATED.lines() {
        let _ = writeln!(o, "# {l}");
    }
    o.push_str("# Declarations of native/engine_api.h: the Rust engine's C function table (via a PyCapsule).\n");
    o.push_str("from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t\n\n");
    o.push_str("from header_batch cimport PacketHeader, pc_record_layout\n\n\n");
    o.push_str("cdef extern from \"engine_api.h\" nogil:\n    enum:\n        PC_ENGINE_ABI_VERSION\n        PC_CAPI_OK\n        PC_CAPI_NULL\n        PC_CAPI_PANIC\n        PC_QUOTE_VALID\n        PC_HTTP_AWAITS\n        PC_HTTP_REQUEST\n        PC_HTTP_TABLE_FULL\n        PC_HTTP_ERROR\n");
    o.push_str("    const char *PC_ENGINE_CAPSULE\n\n");
    o.push_str("    ctypedef struct pc_engine:\n        pass\n    ctypedef struct pc_conntrack:\n        pass\n    ctypedef struct pc_http:\n        pass\n\n");
    for r in engine_api_records() {
        pxd_struct(&mut o, r);
    }
    o.push_str("    ctypedef struct pc_engine_api:\n        uint32_t abi_version\n        uint32_t header_size\n        uint32_t verdict_size\n        uint32_t quote_size\n        uint32_t revoked_size\n");
    for (name, ret, params, _) in API_FUNCTIONS {
        let _ = writeln!(o, "        {ret} (*{name})({params}) noexcept nogil");
    }
    o.push_str(
        "\n    ctypedef struct pc_engine_ref:\n        const pc_engine_api *api\n        const pc_engine *engine\n\n",
    );
    o.push_str("    const pc_record_layout *pc_engine_api_layouts(size_t *n)\n");
    o
}

/// The generated files as `(path relative to the repository root, contents)`.
pub fn files() -> Vec<(&'static str, String)> {
    vec![
        ("native/header_batch.h", header_batch_h()),
        ("native/header_batch.pxd", header_batch_pxd()),
        ("native/engine_api.h", engine_api_h()),
        ("native/engine_api.pxd", engine_api_pxd()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_headers_are_generated() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut stale = Vec::new();
        for (path, text) in files() {
            let committed = std::fs::read_to_string(root.join(path)).unwrap_or_default();
            if committed != text {
                stale.push(path);
            }
        }
        assert!(
            stale.is_empty(),
            "{stale:?} differ from what rust/core/src/abi/headers.rs generates: run \
             `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers` and commit"
        );
    }

    #[test]
    fn records_tile_without_padding() {
        for r in RECORDS {
            let mut end = 0;
            for f in r.fields {
                assert_eq!(f.offset, end, "{}: gap before {}", r.rust_name, f.name);
                end = f.offset + f.size;
            }
            assert_eq!(end, r.size, "{}: trailing padding", r.rust_name);
        }
    }

    #[test]
    fn nested_records_come_first_and_match() {
        for (i, r) in RECORDS.iter().enumerate() {
            for f in r.fields {
                if let Ty::Record(name, _) = f.ty {
                    let j = RECORDS.iter().position(|x| x.rust_name == name).expect("nested record listed");
                    assert!(j < i, "{name} must precede {}", r.rust_name);
                    assert_eq!(RECORDS[j].size, f.size);
                }
            }
        }
    }

    #[test]
    fn the_documented_sizes() {
        let sizes: Vec<_> = RECORDS.iter().map(|r| (r.rust_name, r.size)).collect();
        assert_eq!(
            sizes,
            [
                ("PacketHeader", 64),
                ("OuterHeader", 48),
                ("FlowCounts", 64),
                ("QuotedTuple", 40),
                ("SideVerdict", 20),
                ("PacketVerdict", 44),
                ("RevokedFlow", 40)
            ]
        );
    }
}
