//! Errors: the standard MPI error classes and the error type of tmpi-base.
//!
//! [`MpiErrorClass`] carries the MPI-3.1 error classes and MPI-4.0's
//! `MPI_ERR_SESSION` with the numeric values of MPICH's `mpi.h` (MPICH 4.x
//! ABI), which tmpi's C interface uses too.
//! Every error that reaches an MPI call maps to one class
//! ([`Error::class`]).

use std::fmt;

use crate::mca::McaError;
use crate::modex::ModexError;

/// `MPI_ERR_LASTCODE` as in MPICH's `mpi.h`: user-defined error classes and
/// codes are above it.
pub const MPI_ERR_LASTCODE: i32 = 0x3fff_ffff;

/// The MPI-3.1 error classes (MPI-3.1 §8.4, table 8.1 and the MPI_T classes of
/// §14.3.9) and MPI-4.0's `MPI_ERR_SESSION`, with MPICH's numeric values.
/// Value 54 is unused in MPICH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum MpiErrorClass {
    /// `MPI_SUCCESS` (0): No MPI error.
    Success = 0,
    /// `MPI_ERR_BUFFER` (1): Invalid buffer pointer.
    Buffer = 1,
    /// `MPI_ERR_COUNT` (2): Invalid count argument.
    Count = 2,
    /// `MPI_ERR_TYPE` (3): Invalid datatype argument.
    Type = 3,
    /// `MPI_ERR_TAG` (4): Invalid tag argument.
    Tag = 4,
    /// `MPI_ERR_COMM` (5): Invalid communicator.
    Comm = 5,
    /// `MPI_ERR_RANK` (6): Invalid rank.
    Rank = 6,
    /// `MPI_ERR_ROOT` (7): Invalid root.
    Root = 7,
    /// `MPI_ERR_GROUP` (8): Invalid group.
    Group = 8,
    /// `MPI_ERR_OP` (9): Invalid MPI_Op.
    Op = 9,
    /// `MPI_ERR_TOPOLOGY` (10): Invalid topology.
    Topology = 10,
    /// `MPI_ERR_DIMS` (11): Invalid dimension argument.
    Dims = 11,
    /// `MPI_ERR_ARG` (12): Invalid argument.
    Arg = 12,
    /// `MPI_ERR_UNKNOWN` (13): Unknown error.
    Unknown = 13,
    /// `MPI_ERR_TRUNCATE` (14): Message truncated.
    Truncate = 14,
    /// `MPI_ERR_OTHER` (15): Other MPI error.
    Other = 15,
    /// `MPI_ERR_INTERN` (16): Internal MPI error.
    Intern = 16,
    /// `MPI_ERR_IN_STATUS` (17): Error code is in status.
    InStatus = 17,
    /// `MPI_ERR_PENDING` (18): Pending request (no error).
    Pending = 18,
    /// `MPI_ERR_REQUEST` (19): Invalid MPI_Request.
    Request = 19,
    /// `MPI_ERR_ACCESS` (20): Permission denied.
    Access = 20,
    /// `MPI_ERR_AMODE` (21): Invalid amode value.
    Amode = 21,
    /// `MPI_ERR_BAD_FILE` (22): Invalid file name.
    BadFile = 22,
    /// `MPI_ERR_CONVERSION` (23): An error occurred in a user-supplied data conversion function.
    Conversion = 23,
    /// `MPI_ERR_DUP_DATAREP` (24): Conversion functions could not be registered because the data representation identifier is already defined.
    DupDatarep = 24,
    /// `MPI_ERR_FILE_EXISTS` (25): File exists.
    FileExists = 25,
    /// `MPI_ERR_FILE_IN_USE` (26): File in use by some process.
    FileInUse = 26,
    /// `MPI_ERR_FILE` (27): Invalid MPI_File.
    File = 27,
    /// `MPI_ERR_INFO` (28): Invalid MPI_Info.
    Info = 28,
    /// `MPI_ERR_INFO_KEY` (29): Invalid key for MPI_Info.
    InfoKey = 29,
    /// `MPI_ERR_INFO_VALUE` (30): Invalid MPI_Info value.
    InfoValue = 30,
    /// `MPI_ERR_INFO_NOKEY` (31): MPI_Info key is not defined.
    InfoNokey = 31,
    /// `MPI_ERR_IO` (32): Other I/O error.
    Io = 32,
    /// `MPI_ERR_NAME` (33): Invalid service name.
    Name = 33,
    /// `MPI_ERR_NO_MEM` (34): Allocation of memory failed.
    NoMem = 34,
    /// `MPI_ERR_NOT_SAME` (35): Collective argument is not the same on all processes.
    NotSame = 35,
    /// `MPI_ERR_NO_SPACE` (36): Not enough space.
    NoSpace = 36,
    /// `MPI_ERR_NO_SUCH_FILE` (37): File does not exist.
    NoSuchFile = 37,
    /// `MPI_ERR_PORT` (38): Invalid port.
    Port = 38,
    /// `MPI_ERR_QUOTA` (39): Quota exceeded.
    Quota = 39,
    /// `MPI_ERR_READ_ONLY` (40): Read-only file or filesystem.
    ReadOnly = 40,
    /// `MPI_ERR_SERVICE` (41): Invalid service name.
    Service = 41,
    /// `MPI_ERR_SPAWN` (42): Error in spawn call.
    Spawn = 42,
    /// `MPI_ERR_UNSUPPORTED_DATAREP` (43): Unsupported data representation.
    UnsupportedDatarep = 43,
    /// `MPI_ERR_UNSUPPORTED_OPERATION` (44): Operation not supported.
    UnsupportedOperation = 44,
    /// `MPI_ERR_WIN` (45): Invalid MPI_Win.
    Win = 45,
    /// `MPI_ERR_BASE` (46): Invalid base address.
    Base = 46,
    /// `MPI_ERR_LOCKTYPE` (47): Invalid lock type.
    Locktype = 47,
    /// `MPI_ERR_KEYVAL` (48): Invalid keyval.
    Keyval = 48,
    /// `MPI_ERR_RMA_CONFLICT` (49): Conflicting accesses to window.
    RmaConflict = 49,
    /// `MPI_ERR_RMA_SYNC` (50): Wrong synchronization of RMA calls.
    RmaSync = 50,
    /// `MPI_ERR_SIZE` (51): Invalid size argument.
    Size = 51,
    /// `MPI_ERR_DISP` (52): Invalid displacement argument.
    Disp = 52,
    /// `MPI_ERR_ASSERT` (53): Invalid assert argument.
    Assert = 53,
    /// `MPI_ERR_RMA_RANGE` (55): Target memory is not part of the window.
    RmaRange = 55,
    /// `MPI_ERR_RMA_ATTACH` (56): Memory cannot be attached.
    RmaAttach = 56,
    /// `MPI_ERR_RMA_SHARED` (57): Memory cannot be shared.
    RmaShared = 57,
    /// `MPI_ERR_RMA_FLAVOR` (58): Passed window has the wrong flavor for the called function.
    RmaFlavor = 58,
    /// `MPI_T_ERR_MEMORY` (59): Out of memory.
    TErrMemory = 59,
    /// `MPI_T_ERR_NOT_INITIALIZED` (60): Interface not initialized.
    TErrNotInitialized = 60,
    /// `MPI_T_ERR_CANNOT_INIT` (61): Interface not in the state to be initialized.
    TErrCannotInit = 61,
    /// `MPI_T_ERR_INVALID_INDEX` (62): The index is invalid or has been deleted.
    TErrInvalidIndex = 62,
    /// `MPI_T_ERR_INVALID_ITEM` (63): Item index queried is out of range.
    TErrInvalidItem = 63,
    /// `MPI_T_ERR_INVALID_HANDLE` (64): The handle is invalid.
    TErrInvalidHandle = 64,
    /// `MPI_T_ERR_OUT_OF_HANDLES` (65): No more handles available.
    TErrOutOfHandles = 65,
    /// `MPI_T_ERR_OUT_OF_SESSIONS` (66): No more sessions available.
    TErrOutOfSessions = 66,
    /// `MPI_T_ERR_INVALID_SESSION` (67): Session argument is not valid.
    TErrInvalidSession = 67,
    /// `MPI_T_ERR_CVAR_SET_NOT_NOW` (68): Variable cannot be set at this moment.
    TErrCvarSetNotNow = 68,
    /// `MPI_T_ERR_CVAR_SET_NEVER` (69): Variable cannot be set until end of execution.
    TErrCvarSetNever = 69,
    /// `MPI_T_ERR_PVAR_NO_STARTSTOP` (70): Variable cannot be started or stopped.
    TErrPvarNoStartstop = 70,
    /// `MPI_T_ERR_PVAR_NO_WRITE` (71): Variable cannot be written or reset.
    TErrPvarNoWrite = 71,
    /// `MPI_T_ERR_PVAR_NO_ATOMIC` (72): Variable cannot be read and written atomically.
    TErrPvarNoAtomic = 72,
    /// `MPI_T_ERR_INVALID_NAME` (73): Name doesn't match.
    TErrInvalidName = 73,
    /// `MPI_T_ERR_INVALID` (74): Generic error code for MPI_T invalid parameters.
    TErrInvalid = 74,
    /// `MPI_ERR_SESSION` (75, MPI-4.0; MPICH's value): Invalid session.
    Session = 75,
}

impl MpiErrorClass {
    /// Every class, in numeric order.
    pub const ALL: &'static [MpiErrorClass] = &[
        MpiErrorClass::Success,
        MpiErrorClass::Buffer,
        MpiErrorClass::Count,
        MpiErrorClass::Type,
        MpiErrorClass::Tag,
        MpiErrorClass::Comm,
        MpiErrorClass::Rank,
        MpiErrorClass::Root,
        MpiErrorClass::Group,
        MpiErrorClass::Op,
        MpiErrorClass::Topology,
        MpiErrorClass::Dims,
        MpiErrorClass::Arg,
        MpiErrorClass::Unknown,
        MpiErrorClass::Truncate,
        MpiErrorClass::Other,
        MpiErrorClass::Intern,
        MpiErrorClass::InStatus,
        MpiErrorClass::Pending,
        MpiErrorClass::Request,
        MpiErrorClass::Access,
        MpiErrorClass::Amode,
        MpiErrorClass::BadFile,
        MpiErrorClass::Conversion,
        MpiErrorClass::DupDatarep,
        MpiErrorClass::FileExists,
        MpiErrorClass::FileInUse,
        MpiErrorClass::File,
        MpiErrorClass::Info,
        MpiErrorClass::InfoKey,
        MpiErrorClass::InfoValue,
        MpiErrorClass::InfoNokey,
        MpiErrorClass::Io,
        MpiErrorClass::Name,
        MpiErrorClass::NoMem,
        MpiErrorClass::NotSame,
        MpiErrorClass::NoSpace,
        MpiErrorClass::NoSuchFile,
        MpiErrorClass::Port,
        MpiErrorClass::Quota,
        MpiErrorClass::ReadOnly,
        MpiErrorClass::Service,
        MpiErrorClass::Spawn,
        MpiErrorClass::UnsupportedDatarep,
        MpiErrorClass::UnsupportedOperation,
        MpiErrorClass::Win,
        MpiErrorClass::Base,
        MpiErrorClass::Locktype,
        MpiErrorClass::Keyval,
        MpiErrorClass::RmaConflict,
        MpiErrorClass::RmaSync,
        MpiErrorClass::Size,
        MpiErrorClass::Disp,
        MpiErrorClass::Assert,
        MpiErrorClass::RmaRange,
        MpiErrorClass::RmaAttach,
        MpiErrorClass::RmaShared,
        MpiErrorClass::RmaFlavor,
        MpiErrorClass::TErrMemory,
        MpiErrorClass::TErrNotInitialized,
        MpiErrorClass::TErrCannotInit,
        MpiErrorClass::TErrInvalidIndex,
        MpiErrorClass::TErrInvalidItem,
        MpiErrorClass::TErrInvalidHandle,
        MpiErrorClass::TErrOutOfHandles,
        MpiErrorClass::TErrOutOfSessions,
        MpiErrorClass::TErrInvalidSession,
        MpiErrorClass::TErrCvarSetNotNow,
        MpiErrorClass::TErrCvarSetNever,
        MpiErrorClass::TErrPvarNoStartstop,
        MpiErrorClass::TErrPvarNoWrite,
        MpiErrorClass::TErrPvarNoAtomic,
        MpiErrorClass::TErrInvalidName,
        MpiErrorClass::TErrInvalid,
        MpiErrorClass::Session,
    ];

    /// The numeric value (as in MPICH's `mpi.h`).
    pub fn as_raw(self) -> i32 {
        self as i32
    }

    /// The class with numeric value `raw`, if it is a predefined class.
    pub fn from_raw(raw: i32) -> Option<Self> {
        Some(match raw {
            0 => MpiErrorClass::Success,
            1 => MpiErrorClass::Buffer,
            2 => MpiErrorClass::Count,
            3 => MpiErrorClass::Type,
            4 => MpiErrorClass::Tag,
            5 => MpiErrorClass::Comm,
            6 => MpiErrorClass::Rank,
            7 => MpiErrorClass::Root,
            8 => MpiErrorClass::Group,
            9 => MpiErrorClass::Op,
            10 => MpiErrorClass::Topology,
            11 => MpiErrorClass::Dims,
            12 => MpiErrorClass::Arg,
            13 => MpiErrorClass::Unknown,
            14 => MpiErrorClass::Truncate,
            15 => MpiErrorClass::Other,
            16 => MpiErrorClass::Intern,
            17 => MpiErrorClass::InStatus,
            18 => MpiErrorClass::Pending,
            19 => MpiErrorClass::Request,
            20 => MpiErrorClass::Access,
            21 => MpiErrorClass::Amode,
            22 => MpiErrorClass::BadFile,
            23 => MpiErrorClass::Conversion,
            24 => MpiErrorClass::DupDatarep,
            25 => MpiErrorClass::FileExists,
            26 => MpiErrorClass::FileInUse,
            27 => MpiErrorClass::File,
            28 => MpiErrorClass::Info,
            29 => MpiErrorClass::InfoKey,
            30 => MpiErrorClass::InfoValue,
            31 => MpiErrorClass::InfoNokey,
            32 => MpiErrorClass::Io,
            33 => MpiErrorClass::Name,
            34 => MpiErrorClass::NoMem,
            35 => MpiErrorClass::NotSame,
            36 => MpiErrorClass::NoSpace,
            37 => MpiErrorClass::NoSuchFile,
            38 => MpiErrorClass::Port,
            39 => MpiErrorClass::Quota,
            40 => MpiErrorClass::ReadOnly,
            41 => MpiErrorClass::Service,
            42 => MpiErrorClass::Spawn,
            43 => MpiErrorClass::UnsupportedDatarep,
            44 => MpiErrorClass::UnsupportedOperation,
            45 => MpiErrorClass::Win,
            46 => MpiErrorClass::Base,
            47 => MpiErrorClass::Locktype,
            48 => MpiErrorClass::Keyval,
            49 => MpiErrorClass::RmaConflict,
            50 => MpiErrorClass::RmaSync,
            51 => MpiErrorClass::Size,
            52 => MpiErrorClass::Disp,
            53 => MpiErrorClass::Assert,
            55 => MpiErrorClass::RmaRange,
            56 => MpiErrorClass::RmaAttach,
            57 => MpiErrorClass::RmaShared,
            58 => MpiErrorClass::RmaFlavor,
            59 => MpiErrorClass::TErrMemory,
            60 => MpiErrorClass::TErrNotInitialized,
            61 => MpiErrorClass::TErrCannotInit,
            62 => MpiErrorClass::TErrInvalidIndex,
            63 => MpiErrorClass::TErrInvalidItem,
            64 => MpiErrorClass::TErrInvalidHandle,
            65 => MpiErrorClass::TErrOutOfHandles,
            66 => MpiErrorClass::TErrOutOfSessions,
            67 => MpiErrorClass::TErrInvalidSession,
            68 => MpiErrorClass::TErrCvarSetNotNow,
            69 => MpiErrorClass::TErrCvarSetNever,
            70 => MpiErrorClass::TErrPvarNoStartstop,
            71 => MpiErrorClass::TErrPvarNoWrite,
            72 => MpiErrorClass::TErrPvarNoAtomic,
            73 => MpiErrorClass::TErrInvalidName,
            74 => MpiErrorClass::TErrInvalid,
            75 => MpiErrorClass::Session,
            _ => return None,
        })
    }

    /// The C name (`"MPI_ERR_TAG"`).
    pub fn name(self) -> &'static str {
        match self {
            MpiErrorClass::Success => "MPI_SUCCESS",
            MpiErrorClass::Buffer => "MPI_ERR_BUFFER",
            MpiErrorClass::Count => "MPI_ERR_COUNT",
            MpiErrorClass::Type => "MPI_ERR_TYPE",
            MpiErrorClass::Tag => "MPI_ERR_TAG",
            MpiErrorClass::Comm => "MPI_ERR_COMM",
            MpiErrorClass::Rank => "MPI_ERR_RANK",
            MpiErrorClass::Root => "MPI_ERR_ROOT",
            MpiErrorClass::Group => "MPI_ERR_GROUP",
            MpiErrorClass::Op => "MPI_ERR_OP",
            MpiErrorClass::Topology => "MPI_ERR_TOPOLOGY",
            MpiErrorClass::Dims => "MPI_ERR_DIMS",
            MpiErrorClass::Arg => "MPI_ERR_ARG",
            MpiErrorClass::Unknown => "MPI_ERR_UNKNOWN",
            MpiErrorClass::Truncate => "MPI_ERR_TRUNCATE",
            MpiErrorClass::Other => "MPI_ERR_OTHER",
            MpiErrorClass::Intern => "MPI_ERR_INTERN",
            MpiErrorClass::InStatus => "MPI_ERR_IN_STATUS",
            MpiErrorClass::Pending => "MPI_ERR_PENDING",
            MpiErrorClass::Request => "MPI_ERR_REQUEST",
            MpiErrorClass::Access => "MPI_ERR_ACCESS",
            MpiErrorClass::Amode => "MPI_ERR_AMODE",
            MpiErrorClass::BadFile => "MPI_ERR_BAD_FILE",
            MpiErrorClass::Conversion => "MPI_ERR_CONVERSION",
            MpiErrorClass::DupDatarep => "MPI_ERR_DUP_DATAREP",
            MpiErrorClass::FileExists => "MPI_ERR_FILE_EXISTS",
            MpiErrorClass::FileInUse => "MPI_ERR_FILE_IN_USE",
            MpiErrorClass::File => "MPI_ERR_FILE",
            MpiErrorClass::Info => "MPI_ERR_INFO",
            MpiErrorClass::InfoKey => "MPI_ERR_INFO_KEY",
            MpiErrorClass::InfoValue => "MPI_ERR_INFO_VALUE",
            MpiErrorClass::InfoNokey => "MPI_ERR_INFO_NOKEY",
            MpiErrorClass::Io => "MPI_ERR_IO",
            MpiErrorClass::Name => "MPI_ERR_NAME",
            MpiErrorClass::NoMem => "MPI_ERR_NO_MEM",
            MpiErrorClass::NotSame => "MPI_ERR_NOT_SAME",
            MpiErrorClass::NoSpace => "MPI_ERR_NO_SPACE",
            MpiErrorClass::NoSuchFile => "MPI_ERR_NO_SUCH_FILE",
            MpiErrorClass::Port => "MPI_ERR_PORT",
            MpiErrorClass::Quota => "MPI_ERR_QUOTA",
            MpiErrorClass::ReadOnly => "MPI_ERR_READ_ONLY",
            MpiErrorClass::Service => "MPI_ERR_SERVICE",
            MpiErrorClass::Spawn => "MPI_ERR_SPAWN",
            MpiErrorClass::UnsupportedDatarep => "MPI_ERR_UNSUPPORTED_DATAREP",
            MpiErrorClass::UnsupportedOperation => "MPI_ERR_UNSUPPORTED_OPERATION",
            MpiErrorClass::Win => "MPI_ERR_WIN",
            MpiErrorClass::Base => "MPI_ERR_BASE",
            MpiErrorClass::Locktype => "MPI_ERR_LOCKTYPE",
            MpiErrorClass::Keyval => "MPI_ERR_KEYVAL",
            MpiErrorClass::RmaConflict => "MPI_ERR_RMA_CONFLICT",
            MpiErrorClass::RmaSync => "MPI_ERR_RMA_SYNC",
            MpiErrorClass::Size => "MPI_ERR_SIZE",
            MpiErrorClass::Disp => "MPI_ERR_DISP",
            MpiErrorClass::Assert => "MPI_ERR_ASSERT",
            MpiErrorClass::RmaRange => "MPI_ERR_RMA_RANGE",
            MpiErrorClass::RmaAttach => "MPI_ERR_RMA_ATTACH",
            MpiErrorClass::RmaShared => "MPI_ERR_RMA_SHARED",
            MpiErrorClass::RmaFlavor => "MPI_ERR_RMA_FLAVOR",
            MpiErrorClass::TErrMemory => "MPI_T_ERR_MEMORY",
            MpiErrorClass::TErrNotInitialized => "MPI_T_ERR_NOT_INITIALIZED",
            MpiErrorClass::TErrCannotInit => "MPI_T_ERR_CANNOT_INIT",
            MpiErrorClass::TErrInvalidIndex => "MPI_T_ERR_INVALID_INDEX",
            MpiErrorClass::TErrInvalidItem => "MPI_T_ERR_INVALID_ITEM",
            MpiErrorClass::TErrInvalidHandle => "MPI_T_ERR_INVALID_HANDLE",
            MpiErrorClass::TErrOutOfHandles => "MPI_T_ERR_OUT_OF_HANDLES",
            MpiErrorClass::TErrOutOfSessions => "MPI_T_ERR_OUT_OF_SESSIONS",
            MpiErrorClass::TErrInvalidSession => "MPI_T_ERR_INVALID_SESSION",
            MpiErrorClass::TErrCvarSetNotNow => "MPI_T_ERR_CVAR_SET_NOT_NOW",
            MpiErrorClass::TErrCvarSetNever => "MPI_T_ERR_CVAR_SET_NEVER",
            MpiErrorClass::TErrPvarNoStartstop => "MPI_T_ERR_PVAR_NO_STARTSTOP",
            MpiErrorClass::TErrPvarNoWrite => "MPI_T_ERR_PVAR_NO_WRITE",
            MpiErrorClass::TErrPvarNoAtomic => "MPI_T_ERR_PVAR_NO_ATOMIC",
            MpiErrorClass::TErrInvalidName => "MPI_T_ERR_INVALID_NAME",
            MpiErrorClass::TErrInvalid => "MPI_T_ERR_INVALID",
            MpiErrorClass::Session => "MPI_ERR_SESSION",
        }
    }

    /// The message `MPI_Error_string` returns for the class.
    pub fn message(self) -> &'static str {
        match self {
            MpiErrorClass::Success => "No MPI error",
            MpiErrorClass::Buffer => "Invalid buffer pointer",
            MpiErrorClass::Count => "Invalid count argument",
            MpiErrorClass::Type => "Invalid datatype argument",
            MpiErrorClass::Tag => "Invalid tag argument",
            MpiErrorClass::Comm => "Invalid communicator",
            MpiErrorClass::Rank => "Invalid rank",
            MpiErrorClass::Root => "Invalid root",
            MpiErrorClass::Group => "Invalid group",
            MpiErrorClass::Op => "Invalid MPI_Op",
            MpiErrorClass::Topology => "Invalid topology",
            MpiErrorClass::Dims => "Invalid dimension argument",
            MpiErrorClass::Arg => "Invalid argument",
            MpiErrorClass::Unknown => "Unknown error",
            MpiErrorClass::Truncate => "Message truncated",
            MpiErrorClass::Other => "Other MPI error",
            MpiErrorClass::Intern => "Internal MPI error",
            MpiErrorClass::InStatus => "Error code is in status",
            MpiErrorClass::Pending => "Pending request (no error)",
            MpiErrorClass::Request => "Invalid MPI_Request",
            MpiErrorClass::Access => "Permission denied",
            MpiErrorClass::Amode => "Invalid amode value",
            MpiErrorClass::BadFile => "Invalid file name",
            MpiErrorClass::Conversion => "An error occurred in a user-supplied data conversion function",
            MpiErrorClass::DupDatarep => "Conversion functions could not be registered because the data representation identifier is already defined",
            MpiErrorClass::FileExists => "File exists",
            MpiErrorClass::FileInUse => "File in use by some process",
            MpiErrorClass::File => "Invalid MPI_File",
            MpiErrorClass::Info => "Invalid MPI_Info",
            MpiErrorClass::InfoKey => "Invalid key for MPI_Info",
            MpiErrorClass::InfoValue => "Invalid MPI_Info value",
            MpiErrorClass::InfoNokey => "MPI_Info key is not defined",
            MpiErrorClass::Io => "Other I/O error",
            MpiErrorClass::Name => "Invalid service name",
            MpiErrorClass::NoMem => "Allocation of memory failed",
            MpiErrorClass::NotSame => "Collective argument is not the same on all processes",
            MpiErrorClass::NoSpace => "Not enough space",
            MpiErrorClass::NoSuchFile => "File does not exist",
            MpiErrorClass::Port => "Invalid port",
            MpiErrorClass::Quota => "Quota exceeded",
            MpiErrorClass::ReadOnly => "Read-only file or filesystem",
            MpiErrorClass::Service => "Invalid service name",
            MpiErrorClass::Spawn => "Error in spawn call",
            MpiErrorClass::UnsupportedDatarep => "Unsupported data representation",
            MpiErrorClass::UnsupportedOperation => "Operation not supported",
            MpiErrorClass::Win => "Invalid MPI_Win",
            MpiErrorClass::Base => "Invalid base address",
            MpiErrorClass::Locktype => "Invalid lock type",
            MpiErrorClass::Keyval => "Invalid keyval",
            MpiErrorClass::RmaConflict => "Conflicting accesses to window",
            MpiErrorClass::RmaSync => "Wrong synchronization of RMA calls",
            MpiErrorClass::Size => "Invalid size argument",
            MpiErrorClass::Disp => "Invalid displacement argument",
            MpiErrorClass::Assert => "Invalid assert argument",
            MpiErrorClass::RmaRange => "Target memory is not part of the window",
            MpiErrorClass::RmaAttach => "Memory cannot be attached",
            MpiErrorClass::RmaShared => "Memory cannot be shared",
            MpiErrorClass::RmaFlavor => "Passed window has the wrong flavor for the called function",
            MpiErrorClass::TErrMemory => "Out of memory",
            MpiErrorClass::TErrNotInitialized => "Interface not initialized",
            MpiErrorClass::TErrCannotInit => "Interface not in the state to be initialized",
            MpiErrorClass::TErrInvalidIndex => "The index is invalid or has been deleted",
            MpiErrorClass::TErrInvalidItem => "Item index queried is out of range",
            MpiErrorClass::TErrInvalidHandle => "The handle is invalid",
            MpiErrorClass::TErrOutOfHandles => "No more handles available",
            MpiErrorClass::TErrOutOfSessions => "No more sessions available",
            MpiErrorClass::TErrInvalidSession => "Session argument is not valid",
            MpiErrorClass::TErrCvarSetNotNow => "Variable cannot be set at this moment",
            MpiErrorClass::TErrCvarSetNever => "Variable cannot be set until end of execution",
            MpiErrorClass::TErrPvarNoStartstop => "Variable cannot be started or stopped",
            MpiErrorClass::TErrPvarNoWrite => "Variable cannot be written or reset",
            MpiErrorClass::TErrPvarNoAtomic => "Variable cannot be read and written atomically",
            MpiErrorClass::TErrInvalidName => "Name doesn't match",
            MpiErrorClass::TErrInvalid => "Generic error code for MPI_T invalid parameters",
            MpiErrorClass::Session => "Invalid session",
        }
    }
}

impl From<MpiErrorClass> for i32 {
    fn from(c: MpiErrorClass) -> i32 {
        c.as_raw()
    }
}

impl fmt::Display for MpiErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name(), self.message())
    }
}

/// The error type of tmpi-base. Each variant maps to an [`MpiErrorClass`]
/// through [`Error::class`], so layers above can return MPI error codes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter problem (bad value, bad file, conflicting registration).
    #[error(transparent)]
    Mca(#[from] McaError),
    /// The address exchange failed.
    #[error(transparent)]
    Modex(#[from] ModexError),
    /// The logging subscriber could not be installed.
    #[error("logging: {0}")]
    Logging(String),
    /// A component registry problem (duplicate or unknown component).
    #[error("component {framework} {component}: {reason}")]
    Component {
        /// Framework name.
        framework: String,
        /// Component name.
        component: String,
        /// What is wrong.
        reason: String,
    },
    /// Any other failure with an explicit MPI class.
    #[error("{}: {message}", class.name())]
    Mpi {
        /// The MPI error class.
        class: MpiErrorClass,
        /// What happened.
        message: String,
    },
}

impl Error {
    /// An error of class `class` with `message`.
    pub fn mpi(class: MpiErrorClass, message: impl Into<String>) -> Self {
        Error::Mpi {
            class,
            message: message.into(),
        }
    }

    /// The MPI error class this error is reported as. Configuration problems
    /// (parameters, components) are `MPI_ERR_ARG` when the user gave a bad
    /// value and `MPI_ERR_OTHER` otherwise; internal failures `MPI_ERR_INTERN`.
    pub fn class(&self) -> MpiErrorClass {
        match self {
            Error::Mca(McaError::InvalidValue { .. })
            | Error::Mca(McaError::MalformedFile { .. })
            | Error::Mca(McaError::InvalidEnv { .. }) => MpiErrorClass::Arg,
            Error::Mca(McaError::InvalidDefault { .. })
            | Error::Mca(McaError::InvalidName { .. })
            | Error::Mca(McaError::Conflict { .. }) => MpiErrorClass::Intern,
            Error::Mca(_) => MpiErrorClass::Other,
            Error::Modex(_) => MpiErrorClass::Other,
            Error::Logging(_) => MpiErrorClass::Intern,
            Error::Component { .. } => MpiErrorClass::Other,
            Error::Mpi { class, .. } => *class,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_mpich() {
        let expect = [
            (MpiErrorClass::Success, 0),
            (MpiErrorClass::Buffer, 1),
            (MpiErrorClass::Tag, 4),
            (MpiErrorClass::Arg, 12),
            (MpiErrorClass::Truncate, 14),
            (MpiErrorClass::Intern, 16),
            (MpiErrorClass::Request, 19),
            (MpiErrorClass::Win, 45),
            (MpiErrorClass::Assert, 53),
            (MpiErrorClass::RmaRange, 55),
            (MpiErrorClass::RmaFlavor, 58),
            (MpiErrorClass::TErrMemory, 59),
            (MpiErrorClass::TErrInvalid, 74),
            (MpiErrorClass::Session, 75),
        ];
        for (c, v) in expect {
            assert_eq!(c.as_raw(), v, "{}", c.name());
        }
    }

    #[test]
    fn raw_roundtrip_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for &c in MpiErrorClass::ALL {
            assert!(seen.insert(c.as_raw()), "duplicate value {}", c.as_raw());
            assert_eq!(MpiErrorClass::from_raw(c.as_raw()), Some(c));
            assert!(c.name().starts_with("MPI_"));
            assert!(!c.message().is_empty());
            assert!(c.as_raw() < MPI_ERR_LASTCODE);
        }
        assert_eq!(MpiErrorClass::ALL.len(), 75);
        assert_eq!(MpiErrorClass::from_raw(54), None);
        assert_eq!(MpiErrorClass::from_raw(-1), None);
        assert_eq!(MpiErrorClass::from_raw(76), None);
    }

    #[test]
    fn error_classes() {
        let e: Error = McaError::InvalidValue {
            name: "x".into(),
            value: "y".into(),
            expected: "z".into(),
            origin: crate::mca::Source::CommandLine,
        }
        .into();
        assert_eq!(e.class(), MpiErrorClass::Arg);
        let e = Error::mpi(MpiErrorClass::Truncate, "4 bytes too long");
        assert_eq!(e.class().as_raw(), 14);
        assert_eq!(e.to_string(), "MPI_ERR_TRUNCATE: 4 bytes too long");
    }
}
