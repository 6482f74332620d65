//! Functions of MPI-3.1 that tmpi does not implement: present so that
//! programs link; each fails with `MPI_ERR_UNSUPPORTED_OPERATION` (through
//! the error handler of `MPI_COMM_WORLD`) and a message naming the call.
//!
//! They take no parameters in Rust: the C callers pass theirs in registers
//! or on their own stack frame (caller-cleaned C calling convention), which
//! the stub never reads.

use std::ffi::c_int;

macro_rules! unsupported {
    ($($name:ident => $why:expr;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            crate::error::guard(stringify!($name), crate::state::COMM_WORLD, || {
                Err(crate::error::Error::new(
                    crate::error::MpiErrorClass::UnsupportedOperation,
                    format!("{}: {}", stringify!($name), $why),
                ))
            })
        }
    )*};
}

unsupported! {
    MPI_Close_port => "dynamic process management is not implemented";
    MPI_Comm_accept => "dynamic process management is not implemented";
    MPI_Comm_connect => "dynamic process management is not implemented";
    MPI_Comm_join => "dynamic process management is not implemented";
    MPI_Comm_spawn => "dynamic process management is not implemented";
    MPI_Comm_spawn_multiple => "dynamic process management is not implemented";
    MPI_File_call_errhandler => "MPI-IO is not implemented";
    MPI_File_close => "MPI-IO is not implemented";
    MPI_File_create_errhandler => "MPI-IO is not implemented";
    MPI_File_delete => "MPI-IO is not implemented";
    MPI_File_get_errhandler => "MPI-IO is not implemented";
    MPI_File_get_size => "MPI-IO is not implemented";
    MPI_File_open => "MPI-IO is not implemented";
    MPI_File_read => "MPI-IO is not implemented";
    MPI_File_read_all => "MPI-IO is not implemented";
    MPI_File_read_at => "MPI-IO is not implemented";
    MPI_File_read_at_all => "MPI-IO is not implemented";
    MPI_File_seek => "MPI-IO is not implemented";
    MPI_File_set_errhandler => "MPI-IO is not implemented";
    MPI_File_set_size => "MPI-IO is not implemented";
    MPI_File_set_view => "MPI-IO is not implemented";
    MPI_File_sync => "MPI-IO is not implemented";
    MPI_File_write => "MPI-IO is not implemented";
    MPI_File_write_all => "MPI-IO is not implemented";
    MPI_File_write_at => "MPI-IO is not implemented";
    MPI_File_write_at_all => "MPI-IO is not implemented";
    MPI_Lookup_name => "dynamic process management is not implemented";
    MPI_Open_port => "dynamic process management is not implemented";
    MPI_Publish_name => "dynamic process management is not implemented";
    MPI_Register_datarep => "MPI-IO is not implemented";
    MPI_T_enum_get_info => "MPI_T enumerations are not provided (tmpi defines none)";
    MPI_T_enum_get_item => "MPI_T enumerations are not provided (tmpi defines none)";
    MPI_Unpublish_name => "dynamic process management is not implemented";
}
