//! The file system core over the in-memory store: no FUSE, no network. One test binary
//! with a module per subject: each binary of a release build is linked with thin LTO over
//! the whole dependency tree, and seven of them took minutes of CI on 2 cores.

mod attrs;
mod bodies;
mod common;
mod copies;
mod core_ops;
mod links;
mod model;
mod on_mock;
mod passthrough;
mod posix;
mod reads;
mod recovery;
mod rename_upload;
mod requests;
mod scale_probe;
mod special;
mod status;
mod strays;
mod symlinks;
mod times;
mod walks;
mod writeback;
mod xattrs;
