//! The xattr requests (fs/xattrs.rs does the work). A name outside `user.*` is answered on
//! the FUSE thread without the core: the kernel asks for `security.capability` before
//! writes, and that answer must cost no lock.

use std::ffi::OsStr;
use std::sync::Arc;

use fuser::{INodeNo, ReplyEmpty, ReplyXattr};

use super::reply::{answer, done, utf8, About};
use super::{FuseAdapter, Op};
use crate::error::{FsError, Result};
use crate::fs::{Fs, XattrMode};

/// Answers with `data`, or with its length when `size` is 0 (the caller asks how big a
/// buffer it needs), or ERANGE when it does not fit in `size`.
fn sized(reply: ReplyXattr, size: u32, data: Vec<u8>) {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    match size {
        0 => reply.size(len),
        s if len > s => answer(reply, Err::<(), _>(FsError::Range), |_, ()| {}),
        _ => reply.data(&data),
    }
}

/// The name a request is about, if flowfs keeps it (`user.*`).
fn user_name(name: &OsStr) -> Result<Option<String>> {
    let name = utf8(name)?;
    Ok(name.starts_with("user.").then_some(name))
}

impl FuseAdapter {
    pub(super) fn get_xattr(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let span = self.req(Op::Getxattr, About::Entry(ino.0, name));
        let name = match user_name(name) {
            Ok(Some(name)) => name,
            Ok(None) => return answer(reply, Err(FsError::NoAttr), |_, ()| {}),
            Err(e) => return answer(reply, Err(e), |_, ()| {}),
        };
        let op = |fs: Arc<Fs>| async move { fs.getxattr(ino.0, &name).await };
        self.run(span, reply, op, move |r, v| sized(r, size, v));
    }

    pub(super) fn list_xattr(&self, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let span = self.req(Op::Listxattr, About::Ino(ino.0));
        let op = |fs: Arc<Fs>| async move { fs.listxattr(ino.0).await };
        self.run(span, reply, op, move |r, v| sized(r, size, v));
    }

    pub(super) fn set_xattr(
        &self,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        reply: ReplyEmpty,
    ) {
        let span = self.req(Op::Setxattr, About::Entry(ino.0, name));
        let (name, value) = (utf8(name), value.to_vec());
        let op = |fs: Arc<Fs>| async move {
            let mode = XattrMode::from_flags(flags)?;
            fs.setxattr(ino.0, &name?, &value, mode).await
        };
        self.run(span, reply, op, done);
    }

    pub(super) fn remove_xattr(&self, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let span = self.req(Op::Removexattr, About::Entry(ino.0, name));
        let name = utf8(name);
        let op = |fs: Arc<Fs>| async move { fs.removexattr(ino.0, &name?).await };
        self.run(span, reply, op, done);
    }
}
