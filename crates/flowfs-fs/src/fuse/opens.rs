//! What the kernel and flowfs agree on at INIT, and the opens of files (open, create):
//! each open is planned against its inode's passthrough mode (passthrough.rs), opened by
//! the core, then answered either way.

use std::ffi::OsStr;

use fuser::{FileHandle, FopenFlags, InitFlags, KernelConfig, ReplyCreate, ReplyOpen};

use super::ops::Op;
use super::passthrough::{Created, OpenAccess, Plan};
use super::reply::{open_flags, to_fuse, utf8, About};
use super::FuseAdapter;
use crate::error::FsError;
use crate::fs::OpenMode;

impl FuseAdapter {
    /// The INIT answer: large requests (fewer round trips for sequential I/O),
    /// readdirplus, parallel directory operations, atomic O_TRUNC and, where on,
    /// passthrough.
    pub(super) fn negotiate(&self, config: &mut KernelConfig) {
        if let Err(max) = config.set_max_readahead(1 << 20) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        self.init_passthrough(config);
        // ATOMIC_O_TRUNC: an open with O_TRUNC arrives as such. Without it the kernel
        // opens without the flag, then truncates: the open staged the whole object
        // first (`echo x > f` of a 256 MiB object fetched 256 MiB, issue 26).
        // HANDLE_KILLPRIV_V2: flowfs drops setuid and setgid itself (chown, truncation,
        // write: `AttrChanges::kill_suidgid`). Without it the kernel asks for
        // `security.capability` before every write(), a round trip each (measured: 1,000
        // getxattr for `dd bs=4k count=1000`); with it, once per file.
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        ] {
            if config.capabilities().contains(flag) {
                let _ = config.add_capabilities(flag);
            }
        }
    }

    /// Asks the kernel for passthrough, if it is on. The backing files may be on a
    /// stacked file system (overlayfs, in a container): depth 2, the kernel's maximum,
    /// allows that (and keeps the mount from being stacked under another).
    fn init_passthrough(&self, config: &mut KernelConfig) {
        if !self.pt.enabled() {
            return;
        }
        let flag = InitFlags::FUSE_PASSTHROUGH;
        if !config.capabilities().contains(flag) {
            return self
                .pt
                .unavailable("the kernel does not offer it; it needs Linux 6.9");
        }
        if config.set_max_stack_depth(2).is_err() || config.add_capabilities(flag).is_err() {
            self.pt.unavailable("the kernel refused its stacking depth");
        }
    }

    /// open(2) of `ino` with the kernel's `flags`.
    pub(super) fn open_file(&self, ino: u64, flags: i32, reply: ReplyOpen) {
        let truncate = flags & libc::O_TRUNC != 0;
        let access = OpenAccess::of(flags);
        let write = access != OpenAccess::Read;
        let pt = self.pt.clone();
        let plan_pt = self.pt.clone();
        self.run(
            self.req(Op::Open, About::Ino(ino)),
            reply,
            |fs| async move {
                let plan = plan_pt.plan_waiting(ino, access).await;
                if plan == Plan::Refuse {
                    return Err(FsError::Busy(
                        "opened for writing while read from the cache's file",
                    ));
                }
                let passthrough = plan == Plan::Offer;
                let (fh, hints) = fs
                    .open_as(ino, OpenMode::of(write, truncate), passthrough)
                    .await?;
                let key = hints.backing.as_ref().map(|b| b.key());
                plan_pt.await_compatible(ino, key).await;
                Ok((fs, fh, hints))
            },
            move |r, (fs, fh, hints)| {
                let b = hints.backing.as_ref();
                if !pt.answer(ino, r, FileHandle(fh), open_flags(&hints), b) {
                    let _ = fs.release(fh);
                }
            },
        );
    }

    /// create(2) of `name` in `parent` with (mode, open flags), by `owner`.
    pub(super) fn create_file(
        &self,
        parent: u64,
        name: &OsStr,
        (mode, flags): (u32, i32),
        owner: Option<(u32, u32)>,
        reply: ReplyCreate,
    ) {
        let span = self.req(Op::Create, About::Entry(parent, name));
        let (name, ttl) = (utf8(name), self.ttl);
        // A new file opened for reading and writing may be mapped: through flowfs
        // (passthrough.rs `OpenAccess::ReadWrite`).
        let passthrough = self.pt.enabled() && OpenAccess::of(flags) != OpenAccess::ReadWrite;
        let pt = self.pt.clone();
        self.run(
            span,
            reply,
            |fs| async move {
                let (a, fh, hints) = fs
                    .create_io(parent, &name?, mode, owner, passthrough)
                    .await?;
                Ok((fs, a, fh, hints))
            },
            move |reply, (fs, a, fh, hints)| {
                let attr = to_fuse(&a);
                let r = Created { reply, ttl, attr };
                let (flags, b) = (FopenFlags::empty(), hints.backing.as_ref());
                if !pt.answer(a.ino, r, FileHandle(fh), flags, b) {
                    let _ = fs.release(fh);
                }
            },
        );
    }
}
