//! Predefined element types of collectives and reductions.
//!
//! Collectives move bytes; the element type matters for counts and for
//! reductions. Derived (non-contiguous) datatypes are packed to contiguous
//! bytes by the caller (the `tmpi` facade or the C API) before a collective
//! and unpacked after; this crate sees predefined element types, and
//! [`Datatype::Derived`] items for user ops on derived types.
//! Elements are in the machine's native byte order and layout (C structs for
//! the pair types, with their padding).

use std::fmt;

/// A predefined MPI datatype usable as the element type of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Datatype {
    /// `MPI_BYTE`: uninterpreted bytes (bitwise ops only).
    Byte,
    /// `MPI_CHAR`: characters. MPI-4.0 §6.9.2 gives no reduction for
    /// them, but Open MPI and MPICH reduce them as C `char` integers
    /// (signed or not as the platform's `char`) and programs rely on it
    /// (benchmarks reduce `MPI_CHAR` by default): so does tmpi.
    Char,
    /// `MPI_C_BOOL`: one byte, 0 = false (logical ops).
    Bool,
    /// `MPI_INT8_T` / `MPI_SIGNED_CHAR`.
    I8,
    /// `MPI_UINT8_T` / `MPI_UNSIGNED_CHAR`.
    U8,
    /// `MPI_INT16_T` / `MPI_SHORT`.
    I16,
    /// `MPI_UINT16_T` / `MPI_UNSIGNED_SHORT`.
    U16,
    /// `MPI_INT32_T` / `MPI_INT`.
    I32,
    /// `MPI_UINT32_T` / `MPI_UNSIGNED`.
    U32,
    /// `MPI_INT64_T` / `MPI_LONG` (LP64) / `MPI_LONG_LONG`.
    I64,
    /// `MPI_UINT64_T` / `MPI_UNSIGNED_LONG`.
    U64,
    /// `MPI_FLOAT`.
    F32,
    /// `MPI_DOUBLE`.
    F64,
    /// `MPI_FLOAT_INT`: `struct { float v; int i; }`, 8 bytes.
    FloatInt,
    /// `MPI_DOUBLE_INT`: `struct { double v; int i; }`, 16 bytes (4 of padding).
    DoubleInt,
    /// `MPI_LONG_INT`: `struct { long v; int i; }`, 16 bytes (4 of padding).
    LongInt,
    /// `MPI_2INT`: `struct { int v; int i; }`, 8 bytes.
    TwoInt,
    /// `MPI_SHORT_INT`: `struct { short v; int i; }`, 8 bytes (2 of padding after `v`).
    ShortInt,
    /// `MPI_DOUBLE_INT` packed: the double then the int, 12 bytes, no
    /// padding (how the C API hands the pair types over: packed by their
    /// type map, or contiguous only when resized to their size).
    PackedDoubleInt,
    /// `MPI_LONG_INT` packed: 12 bytes.
    PackedLongInt,
    /// `MPI_SHORT_INT` packed: the short then the int, 6 bytes.
    PackedShortInt,
    /// An item of a derived (or otherwise opaque) datatype of this many
    /// bytes, packed: only user ops reduce it. Every algorithm splits a
    /// vector on whole elements, so a user function always sees whole items
    /// of the caller's datatype and counts in them (a reduction over a
    /// contiguous type of 9 ints calls it with counts of matrices, never
    /// of ints). Never 0 bytes.
    Derived(u32),
}

/// The type classes of MPI-3.1 §5.9.2 that decide which ops apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeClass {
    /// C integer.
    Integer,
    /// Floating point.
    Float,
    /// Logical (`MPI_C_BOOL`).
    Logical,
    /// `MPI_BYTE`.
    Byte,
    /// Value/index pair (MAXLOC, MINLOC).
    Pair,
    /// No reduction applies (derived types).
    None,
}

impl Datatype {
    /// Every predefined type in its native layout, for exhaustive tests.
    pub const ALL: &'static [Datatype] = &[
        Datatype::Byte,
        Datatype::Char,
        Datatype::Bool,
        Datatype::I8,
        Datatype::U8,
        Datatype::I16,
        Datatype::U16,
        Datatype::I32,
        Datatype::U32,
        Datatype::I64,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
        Datatype::FloatInt,
        Datatype::DoubleInt,
        Datatype::LongInt,
        Datatype::TwoInt,
        Datatype::ShortInt,
    ];

    /// Size of one element in bytes (its extent: pair types include padding).
    pub const fn size(self) -> usize {
        match self {
            Datatype::Byte | Datatype::Char | Datatype::Bool | Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
            Datatype::FloatInt | Datatype::TwoInt | Datatype::ShortInt => 8,
            Datatype::DoubleInt | Datatype::LongInt => 16,
            Datatype::PackedDoubleInt | Datatype::PackedLongInt => 12,
            Datatype::PackedShortInt => 6,
            Datatype::Derived(n) => n as usize,
        }
    }

    /// The MPI name (`"MPI_INT32_T"`).
    pub const fn name(self) -> &'static str {
        match self {
            Datatype::Byte => "MPI_BYTE",
            Datatype::Char => "MPI_CHAR",
            Datatype::Bool => "MPI_C_BOOL",
            Datatype::I8 => "MPI_INT8_T",
            Datatype::U8 => "MPI_UINT8_T",
            Datatype::I16 => "MPI_INT16_T",
            Datatype::U16 => "MPI_UINT16_T",
            Datatype::I32 => "MPI_INT32_T",
            Datatype::U32 => "MPI_UINT32_T",
            Datatype::I64 => "MPI_INT64_T",
            Datatype::U64 => "MPI_UINT64_T",
            Datatype::F32 => "MPI_FLOAT",
            Datatype::F64 => "MPI_DOUBLE",
            Datatype::FloatInt => "MPI_FLOAT_INT",
            Datatype::DoubleInt => "MPI_DOUBLE_INT",
            Datatype::LongInt => "MPI_LONG_INT",
            Datatype::TwoInt => "MPI_2INT",
            Datatype::ShortInt => "MPI_SHORT_INT",
            Datatype::PackedDoubleInt => "MPI_DOUBLE_INT",
            Datatype::PackedLongInt => "MPI_LONG_INT",
            Datatype::PackedShortInt => "MPI_SHORT_INT",
            Datatype::Derived(_) => "a derived datatype",
        }
    }

    /// Its reduction type class.
    pub const fn class(self) -> TypeClass {
        match self {
            Datatype::Byte => TypeClass::Byte,
            Datatype::Char => TypeClass::Integer,
            Datatype::Bool => TypeClass::Logical,
            Datatype::I8
            | Datatype::U8
            | Datatype::I16
            | Datatype::U16
            | Datatype::I32
            | Datatype::U32
            | Datatype::I64
            | Datatype::U64 => TypeClass::Integer,
            Datatype::F32 | Datatype::F64 => TypeClass::Float,
            Datatype::FloatInt
            | Datatype::DoubleInt
            | Datatype::LongInt
            | Datatype::TwoInt
            | Datatype::ShortInt
            | Datatype::PackedDoubleInt
            | Datatype::PackedLongInt
            | Datatype::PackedShortInt => TypeClass::Pair,
            Datatype::Derived(_) => TypeClass::None,
        }
    }

    /// Number of whole elements in `bytes`, or an `MPI_ERR_COUNT` error when
    /// `bytes` is not a multiple of the element size.
    pub fn count_of(self, bytes: usize) -> crate::Result<usize> {
        if self.size() == 0 || !bytes.is_multiple_of(self.size()) {
            return Err(crate::CollError::Count(format!(
                "{bytes} bytes is not a whole number of {} elements ({} bytes each)",
                self.name(),
                self.size()
            )));
        }
        Ok(bytes / self.size())
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
