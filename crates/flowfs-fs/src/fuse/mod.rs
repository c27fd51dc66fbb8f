//! The fuser adapter. A request is answered on its FUSE thread when nothing has to be
//! waited for; one that must wait (a GET, an upload) is handed to tokio and answered from
//! there, so a FUSE worker thread never waits on the network while other requests queue
//! behind it.
//!
//! Every request runs in a debug span named `fuse` with the operation and what it is about
//! (inode, handle, parent and name), and every error reaches the kernel through
//! `reply::answer`: the one place that maps an `FsError` to its errno and logs it, at
//! debug level, inside that span.

mod adapter;
mod dirs;
mod opens;
mod ops;
mod passthrough;
mod reply;
mod writes;
mod xattrs;

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    FileHandle, FopenFlags, INodeNo, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request,
};

use crate::fs::{AttrChanges, CopyRange, Fs};
pub use adapter::FuseAdapter;
pub use ops::{FuseOpCounts, Op, OpStats};
use reply::{answer, done, to_fuse, utf8, About};

impl fuser::Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.negotiate(config);
        Ok(())
    }

    fn destroy(&mut self) {
        self.fs.shutdown();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let span = self.req(Op::Lookup, About::Entry(parent.0, name));
        let name = utf8(name);
        self.entry(span, reply, |fs| async move {
            fs.lookup(parent.0, &name?).await
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _span = self.req(Op::Forget, About::Ino(ino.0)).entered();
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ttl = self.ttl;
        self.run(
            self.req(Op::Getattr, About::Ino(ino.0)),
            reply,
            |fs| async move { fs.getattr(ino.0).await },
            move |r, a| r.attr(&ttl, &to_fuse(&a)),
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.run(
            self.req(Op::Readlink, About::Ino(ino.0)),
            reply,
            |fs| async move { fs.readlink(ino.0).await },
            |r, t| r.data(t.as_bytes()),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.open_file(ino.0, flags.0, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.run(
            self.req(Op::Read, About::Handle(ino.0, fh.0)),
            reply,
            |fs| async move { fs.read(fh.0, offset, size).await },
            |r, data| r.data(&data),
        );
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        if self.fs.needs_settle(fh.0) {
            // A copy made ahead of calls that stopped short: cut to what they got.
            let span = self.req(Op::Flush, About::Handle(ino.0, fh.0));
            return self.run(span, reply, |fs| async move { fs.settle(fh.0).await }, done);
        }
        let _span = self.req(Op::Flush, About::Handle(ino.0, fh.0)).entered();
        // close() learns here that an earlier upload of this file failed.
        answer(reply, self.fs.flush(fh.0), done);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _span = self.req(Op::Release, About::Handle(ino.0, fh.0)).entered();
        // Release may start an upload, which runs on the runtime.
        let _rt = self.rt.enter();
        let r = self.fs.release(fh.0);
        self.pt.released(ino.0);
        answer(reply, r, done);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _span = self.req(Op::Opendir, About::Ino(ino.0)).entered();
        answer(reply, self.fs.opendir(ino.0), |r, fh| {
            r.opened(FileHandle(fh), FopenFlags::empty())
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.run(
            self.req(Op::Readdir, About::Handle(ino.0, fh.0)),
            reply,
            |fs| async move { fs.readdir(ino.0, fh.0, offset, false).await },
            dirs::fill,
        );
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let (nodes, ttl) = (self.fs.clone(), self.ttl);
        self.run(
            self.req(Op::Readdirplus, About::Handle(ino.0, fh.0)),
            reply,
            |fs| async move { fs.readdir(ino.0, fh.0, offset, true).await },
            move |r, items| dirs::fill_plus(r, items, ttl, &nodes),
        );
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _span = self
            .req(Op::Releasedir, About::Handle(ino.0, fh.0))
            .entered();
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _span = self.req(Op::Statfs, About::Ino(ino.0)).entered();
        // Object storage has no fixed size: report plenty so that tools do not refuse.
        let blocks = 1u64 << 40;
        reply.statfs(blocks, blocks, blocks, 1 << 30, 1 << 30, 4096, 255, 4096);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let c = AttrChanges {
            mode,
            uid,
            gid,
            atime: dirs::time(atime),
            mtime: dirs::time(mtime),
            kill_suidgid: false,
        };
        self.set_attr(ino, (c, size), fh, req.uid() == 0, reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let span = self.req(Op::Mknod, About::Entry(parent.0, name));
        let owner = Some((req.uid(), req.gid()));
        let name = utf8(name);
        self.entry(span, reply, |fs| async move {
            fs.mknod(parent.0, &name?, mode, rdev, owner).await
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let span = self.req(Op::Mkdir, About::Entry(parent.0, name));
        let owner = Some((req.uid(), req.gid()));
        let name = utf8(name);
        self.entry(span, reply, |fs| async move {
            fs.mkdir(parent.0, &name?, mode, owner).await
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let span = self.req(Op::Unlink, About::Entry(parent.0, name));
        let name = utf8(name);
        let op = |fs: Arc<Fs>| async move { fs.unlink(parent.0, &name?).await };
        self.run(span, reply, op, done);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let span = self.req(Op::Rmdir, About::Entry(parent.0, name));
        let name = utf8(name);
        let op = |fs: Arc<Fs>| async move { fs.rmdir(parent.0, &name?).await };
        self.run(span, reply, op, done);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let span = self.req(Op::Symlink, About::Entry(parent.0, link_name));
        let (name, target) = (utf8(link_name), utf8(target.as_os_str()));
        let owner = Some((req.uid(), req.gid()));
        self.entry(span, reply, |fs| async move {
            fs.symlink(parent.0, &name?, &target?, owner).await
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
        self.rename_entry((parent, name), (newparent, newname), flags, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let span = self.req(Op::Link, About::Entry(newparent.0, newname));
        let name = utf8(newname);
        self.entry(span, reply, |fs| async move {
            fs.link(ino.0, newparent.0, &name?).await
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: fuser::WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.write_data(ino, fh, offset, data, wf, reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let span = self.req(Op::Fsync, About::Handle(ino.0, fh.0));
        self.run(span, reply, |fs| async move { fs.fsync(fh.0).await }, done);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let span = self.req(Op::Fsyncdir, About::Handle(ino.0, fh.0));
        let op = |fs: Arc<Fs>| async move { fs.fsyncdir(ino.0).await };
        self.run(span, reply, op, done);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let owner = Some((req.uid(), req.gid()));
        self.create_file(parent.0, name, (mode, flags), owner, reply);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.allocate(ino, fh, (offset, length), mode, reply);
    }

    /// A copy the server can make is made there (fs/copy.rs); any other is refused with
    /// EOPNOTSUPP, on which the kernel copies the bytes itself through reads and writes
    /// (ENOSYS would turn the call off for the whole mount).
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let c = CopyRange {
            from: (fh_in.0, offset_in),
            to: (fh_out.0, offset_out),
            len,
        };
        self.copy_range(ino_in, c, reply);
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.set_xattr(ino, name, value, flags, reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.get_xattr(ino, name, size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.list_xattr(ino, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_xattr(ino, name, reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let _span = self.req(Op::Access, About::Ino(ino.0)).entered();
        reply.ok();
    }
}
