//! The requests that change a file's bytes or attributes: write (answered on the FUSE
//! thread unless the writer's object must be staged first), setattr (with the setuid and
//! setgid bits the kernel leaves to flowfs, KILLPRIV_V2), fallocate and copy_file_range.

use std::sync::Arc;

use fuser::{FileHandle, INodeNo, ReplyAttr, ReplyEmpty, ReplyWrite};

use super::reply::{answer, done, to_fuse, About};
use super::{FuseAdapter, Op};
use crate::error::FsError;
use crate::fs::{AttrChanges, CopyRange, Fs};

impl FuseAdapter {
    /// setattr: `c` and a new size; `by_root` stands for CAP_FSETID, which the request
    /// does not tell.
    pub(super) fn set_attr(
        &self,
        ino: INodeNo,
        (c, size): (AttrChanges, Option<u64>),
        fh: Option<FileHandle>,
        by_root: bool,
        reply: ReplyAttr,
    ) {
        // What the kernel's FATTR_KILL_SUIDGID says (fuser does not pass it on): a chown,
        // or a truncation by a caller other than root. A setattr of nothing is the kernel
        // dropping them before a write by such a caller (seen: the write itself does not
        // carry FUSE_WRITE_KILL_SUIDGID) or for `chown -1 -1`.
        let nothing = c == AttrChanges::default() && size.is_none();
        let chown = c.uid.is_some() || c.gid.is_some();
        let c = AttrChanges {
            kill_suidgid: chown || (size.is_some() && !by_root) || nothing,
            ..c
        };
        let (fh, ttl) = (fh.map(|f| f.0), self.ttl);
        self.run(
            self.req(Op::Setattr, About::Ino(ino.0)),
            reply,
            |fs| async move { fs.setattr_with(ino.0, size, c, fh).await },
            move |r, a| r.attr(&ttl, &to_fuse(&a)),
        );
    }

    /// write: local disk only, answered on this thread, unless it is the writer's first
    /// change of an object not staged yet (a download first, on the runtime).
    pub(super) fn write_data(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: fuser::WriteFlags,
        reply: ReplyWrite,
    ) {
        if wf.contains(fuser::WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            let _rt = self.rt.enter();
            if let Err(e) = self.fs.kill_privs(ino.0) {
                let _span = self.req(Op::Write, About::Handle(ino.0, fh.0)).entered();
                return answer(reply, Err(e), |r, n| r.written(n));
            }
        }
        if self.fs.needs_stage(fh.0) {
            let (data, span) = (
                data.to_vec(),
                self.req(Op::Write, About::Handle(ino.0, fh.0)),
            );
            let op = |fs: Arc<Fs>| async move { fs.write_staging(fh.0, offset, data).await };
            return self.run(span, reply, op, |r, n| r.written(n));
        }
        let _span = self.req(Op::Write, About::Handle(ino.0, fh.0)).entered();
        // It may start the early upload of parts the writer has left behind, which runs
        // on the runtime.
        let _rt = self.rt.enter();
        answer(reply, self.fs.write(fh.0, offset, data), |r, n| {
            r.written(n)
        });
    }

    /// fallocate of `(offset, length)`: mode 0 only (punching holes, zeroing and
    /// collapsing ranges are not in objects).
    pub(super) fn allocate(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        (offset, length): (u64, u64),
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let op = |fs: Arc<Fs>| async move {
            if mode != 0 {
                return Err(FsError::NotSupported("fallocate modes"));
            }
            fs.fallocate(fh.0, offset, length).await
        };
        self.run(
            self.req(Op::Fallocate, About::Handle(ino.0, fh.0)),
            reply,
            op,
            done,
        );
    }

    /// copy_file_range: a copy the server can make is made there (fs/copy.rs); any other
    /// is refused with EOPNOTSUPP, on which the kernel copies the bytes itself through
    /// reads and writes (ENOSYS would turn the call off for the whole mount).
    pub(super) fn copy_range(&self, ino_in: INodeNo, c: CopyRange, reply: ReplyWrite) {
        let span = self.req(Op::CopyFileRange, About::Handle(ino_in.0, c.from.0));
        let op = |fs: Arc<Fs>| async move {
            match fs.copy_range(c).await? {
                // At most the kernel's cap of one call (4 GiB - 4 KiB), which fits.
                Some(n) => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
                None => Err(FsError::NotSupported(
                    "copy_file_range other than a whole object",
                )),
            }
        };
        self.run(span, reply, op, |r, n| r.written(n));
    }
}
