//! The C ABI records, defined once — here, in Rust — and written out for the other layers.
//!
//! Each record shared with C, Cython or numpy (`PacketHeader`, `QuotedTuple`, `SideVerdict`,
//! `PacketVerdict`, `RevokedFlow`) is declared with [`abi_record!`](crate::abi_record), which
//! emits the `#[repr(C)]` struct and a description of its layout computed by the compiler
//! (names, offsets, sizes, types). From those descriptions:
//!
//! - [`headers`] lists them ([`headers::RECORDS`]) and writes the C headers and Cython
//!   declarations under `native/`
//!   (`header_batch.h`/`.pxd`, `engine_api.h`/`.pxd`). They are committed, generated files: the
//!   test `committed_headers_are_generated` fails when they differ from what this module writes,
//!   and `cargo run --manifest-path rust/Cargo.toml -p pyclassify-core --bin abi-headers`
//!   rewrites them.
//! - `pyclassify._engine.record_layouts()` exports them, and `pyclassify.batch` builds its numpy
//!   dtypes from that at import.
//!
//! `tests/test_batch_abi.py` holds the three views (Rust, the C compiler's, numpy) to the same
//! fields, offsets and sizes, record by record.

pub mod headers;

/// The type of one record field, as C, Cython and numpy need to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    U8,
    U16,
    U32,
    U64,
    I32,
    /// `[u8; N]`: raw bytes.
    Bytes(usize),
    /// Another record: `(Rust name, C name)`.
    Record(&'static str, &'static str),
}

impl Ty {
    fn c(self) -> &'static str {
        match self {
            Ty::U8 | Ty::Bytes(_) => "uint8_t",
            Ty::U16 => "uint16_t",
            Ty::U32 => "uint32_t",
            Ty::U64 => "uint64_t",
            Ty::I32 => "int32_t",
            Ty::Record(_, c) => c,
        }
    }

    /// The type as `pyclassify._engine.record_layouts()` names it: `u8`, `u16`, `u32`, `u64`,
    /// `i32`, `u8[N]`, or the Rust name of a nested record.
    pub fn name(self) -> String {
        match self {
            Ty::U8 => "u8".into(),
            Ty::U16 => "u16".into(),
            Ty::U32 => "u32".into(),
            Ty::U64 => "u64".into(),
            Ty::I32 => "i32".into(),
            Ty::Bytes(n) => format!("u8[{n}]"),
            Ty::Record(rust, _) => rust.into(),
        }
    }
}

/// A Rust type that may be a record field.
pub trait AbiType {
    const TY: Ty;
}

impl AbiType for u8 {
    const TY: Ty = Ty::U8;
}
impl AbiType for u16 {
    const TY: Ty = Ty::U16;
}
impl AbiType for u32 {
    const TY: Ty = Ty::U32;
}
impl AbiType for u64 {
    const TY: Ty = Ty::U64;
}
impl AbiType for i32 {
    const TY: Ty = Ty::I32;
}
impl<const N: usize> AbiType for [u8; N] {
    const TY: Ty = Ty::Bytes(N);
}

/// One field of a record.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
    pub ty: Ty,
    /// Its doc comment, line by line.
    pub doc: &'static [&'static str],
}

/// A record's layout, computed by the compiler.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// The Rust module that defines it.
    pub module: &'static str,
    pub rust_name: &'static str,
    pub c_name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: &'static [Field],
}

/// A record declared with [`abi_record!`](crate::abi_record).
pub trait AbiRecord {
    const RECORD: Record;
}

/// Declares a `#[repr(C)]` record shared with C: the struct itself (with the attributes given)
/// and its [`AbiRecord`] and [`AbiType`] implementations. Fields may carry doc comments only.
#[macro_export]
macro_rules! abi_record {
    (
        $(#[$meta:meta])*
        pub struct $name:ident as $c:literal {
            $( $(#[doc = $fdoc:literal])* pub $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        pub struct $name {
            $( $(#[doc = $fdoc])* pub $f : $t ),*
        }

        impl $crate::abi::AbiRecord for $name {
            const RECORD: $crate::abi::Record = $crate::abi::Record {
                module: module_path!(),
                rust_name: stringify!($name),
                c_name: $c,
                size: ::core::mem::size_of::<$name>(),
                align: ::core::mem::align_of::<$name>(),
                fields: &[$(
                    $crate::abi::Field {
                        name: stringify!($f),
                        offset: ::core::mem::offset_of!($name, $f),
                        size: ::core::mem::size_of::<$t>(),
                        ty: <$t as $crate::abi::AbiType>::TY,
                        doc: &[$($fdoc),*],
                    }
                ),*],
            };
        }

        impl $crate::abi::AbiType for $name {
            const TY: $crate::abi::Ty = $crate::abi::Ty::Record(stringify!($name), $c);
        }
    };
}
