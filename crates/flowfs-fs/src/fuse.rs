//! The fuser adapter. A request is answered on its FUSE thread when nothing has to be
//! waited for; one that must wait (a GET, an upload) is handed to tokio and answered from
//! there, so a FUSE worker thread never waits on the network while other requests queue
//! behind it.

use std::ffi::OsStr;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};
use tokio::runtime::Handle;

use crate::error::FsError;
use crate::fs::{Attr, Fs};
use crate::inode::Kind;

/// Answers the kernel's FUSE requests with the methods of `Fs`.
pub struct FuseAdapter {
    fs: Arc<Fs>,
    rt: Handle,
    ttl: Duration,
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn to_fuse(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

fn name_str(name: &OsStr) -> Result<String, Errno> {
    name.to_str()
        .map(str::to_string)
        .ok_or(Errno::from_i32(libc::EINVAL))
}

impl FuseAdapter {
    /// An adapter over `fs` that runs what must wait on the runtime of `rt`.
    pub fn new(fs: Arc<Fs>, rt: Handle) -> FuseAdapter {
        let ttl = fs.config().metadata_ttl;
        FuseAdapter { fs, rt, ttl }
    }

    /// Answers a request on this FUSE thread when it needs no waiting (metadata in
    /// memory, data already fetched): most requests of a warm or prefetched workload.
    /// Only a request that must wait moves to the runtime. Handing every request to
    /// another thread cost two context switches each, the largest single cost of
    /// reading many small files on a small machine.
    fn run<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        let _rt = self.rt.enter();
        let mut fut = Box::pin(fut);
        let mut cx = Context::from_waker(Waker::noop());
        // Polling again from the runtime registers its real waker: a resource first
        // polled here with the no-op waker is then watched as usual.
        if fut.as_mut().poll(&mut cx).is_pending() {
            self.rt.spawn(fut);
        }
    }
}

impl fuser::Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Large requests: fewer round trips for sequential I/O.
        if let Err(max) = config.set_max_readahead(1 << 20) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_PARALLEL_DIROPS,
        ] {
            if config.capabilities().contains(flag) {
                let _ = config.add_capabilities(flag);
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.fs.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.lookup(parent.0, &name).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.getattr(ino.0).await {
                Ok(a) => reply.attr(&ttl, &to_fuse(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let fs = self.fs.clone();
        self.run(async move {
            match fs.readlink(ino.0).await {
                Ok(t) => reply.data(t.as_bytes()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY) || truncate;
        let fs = self.fs.clone();
        self.run(async move {
            match fs.open(ino.0, write, truncate).await {
                Ok((fh, hints)) => {
                    let mut f = FopenFlags::empty();
                    if hints.keep_cache {
                        f |= FopenFlags::FOPEN_KEEP_CACHE;
                    }
                    // One round trip less per close of a file read from the bucket
                    // (kernels before 5.16 ignore the flag and send it anyway).
                    if hints.no_flush {
                        f |= FopenFlags::FOPEN_NOFLUSH;
                    }
                    reply.opened(FileHandle(fh), f)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.fs.clone();
        self.run(async move {
            match fs.read(fh.0, offset, size).await {
                Ok(data) => reply.data(&data),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() learns here that an earlier upload of this file failed.
        match self.fs.flush(fh.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Release may start an upload, which runs on the runtime.
        let _rt = self.rt.enter();
        match self.fs.release(fh.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let fs = self.fs.clone();
        self.run(async move {
            match fs.readdir(ino.0, fh.0, offset, false).await {
                Ok(items) => {
                    for it in items {
                        if reply.add(INodeNo(it.ino), it.next, file_type(it.kind), &it.name) {
                            break;
                        }
                    }
                    reply.ok()
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.readdir(ino.0, fh.0, offset, true).await {
                Ok(items) => {
                    let mut full = false;
                    for it in items {
                        let counted = it.name != "." && it.name != "..";
                        if !full {
                            if let Some(a) = &it.attr {
                                full = reply.add(
                                    INodeNo(it.ino),
                                    it.next,
                                    &it.name,
                                    &ttl,
                                    &to_fuse(a),
                                    Generation(0),
                                );
                            }
                        }
                        // The kernel takes a reference only on entries it received.
                        if full && counted {
                            fs.forget(it.ino, 1);
                        }
                    }
                    reply.ok()
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Object storage has no fixed size: report plenty so that tools do not refuse.
        let blocks = 1u64 << 40;
        reply.statfs(blocks, blocks, blocks, 1 << 30, 1 << 30, 4096, 255, 4096);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mtime = mtime.map(|t| match t {
            fuser::TimeOrNow::SpecificTime(t) => t,
            fuser::TimeOrNow::Now => SystemTime::now(),
        });
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.setattr(ino.0, mode, size, mtime, fh.map(|f| f.0)).await {
                Ok(a) => reply.attr(&ttl, &to_fuse(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.mknod(parent.0, &name, mode).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.mkdir(parent.0, &name, mode).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let fs = self.fs.clone();
        self.run(async move {
            match fs.unlink(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let fs = self.fs.clone();
        self.run(async move {
            match fs.rmdir(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let (name, target) = match (name_str(link_name), name_str(target.as_os_str())) {
            (Ok(n), Ok(t)) => (n, t),
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.symlink(parent.0, &name, &target).await {
                Ok(a) => reply.entry(&ttl, &to_fuse(&a), Generation(0)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = match (name_str(name), name_str(newname)) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        if flags.contains(fuser::RenameFlags::RENAME_EXCHANGE)
            || flags.contains(fuser::RenameFlags::RENAME_WHITEOUT)
        {
            return reply.error(Errno::from_i32(libc::EINVAL));
        }
        let noreplace = flags.contains(fuser::RenameFlags::RENAME_NOREPLACE);
        let fs = self.fs.clone();
        self.run(async move {
            match fs
                .rename(parent.0, &name, newparent.0, &newname, noreplace)
                .await
            {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // Object storage has no way to give one object two names.
        reply.error(Errno::from_i32(libc::ENOTSUP));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: fuser::WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        // Local disk only: answered on this thread. It may start the early upload of
        // parts the writer has left behind, which runs on the runtime.
        let _rt = self.rt.enter();
        match self.fs.write(fh.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        self.run(async move {
            match fs.fsync(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        self.run(async move {
            match fs.fsyncdir(ino.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        let name = match name_str(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let (fs, ttl) = (self.fs.clone(), self.ttl);
        self.run(async move {
            match fs.create(parent.0, &name, mode).await {
                Ok((a, fh)) => reply.created(
                    &ttl,
                    &to_fuse(&a),
                    Generation(0),
                    FileHandle(fh),
                    FopenFlags::empty(),
                ),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let fs = self.fs.clone();
        self.run(async move {
            match fs.fallocate(fh.0, offset, length).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
