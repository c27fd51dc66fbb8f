//! FUSE passthrough (Linux ≥ 6.9): an open file whose bytes are in a local file (a
//! staged copy) is served by the kernel from that file, with no round trip through
//! flowfs for its reads and writes.
//!
//! The kernel's rules (fs/fuse/iomode.c), which this module keeps for every inode:
//! while one open of an inode is served by passthrough, every other open of it must be
//! too, from the same registered backing file (else EINVAL or EBUSY), and a
//! passthrough open is refused while opens served through flowfs exist (ETXTBSY). So
//! each inode with open handles is in one `IoMode`, and an open follows the mode its
//! inode is in. One lock guards the modes; the kernel registration of a backing file
//! (an ioctl, no disk or network I/O) is made under it so that two opens of one inode
//! never register two.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fuser::{BackingId, FileHandle, FopenFlags, Generation, ReplyCreate, ReplyOpen};
use parking_lot::Mutex;

use crate::fs::{Backing, BackingKey};

/// How the open handles of one inode are served.
enum IoMode {
    /// Through flowfs (`handles` of them).
    Flowfs { handles: u32 },
    /// By the kernel from `key`'s file, registered as `id`.
    Kernel {
        key: BackingKey,
        id: Arc<BackingId>,
        handles: u32,
    },
}

/// Whether this mount uses passthrough.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Turned off by `--passthrough off`, or not offered by the kernel.
    Off,
    /// Asked for; no file served that way yet.
    On,
    /// The kernel has served a file (said once in the log).
    Serving,
}

struct State {
    usage: Use,
    inodes: HashMap<u64, IoMode>,
}

/// How long an open for writing waits for the passthrough readers of the cache's file to
/// be released before it is refused: the kernel sends RELEASE after close() has returned,
/// so a script's `cat f; echo x > f` found the reader still counted (1 run in 3 of
/// test_writer_is_refused_while_the_cache_file_is_passed_through).
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// The passthrough state of a mount: every inode's `IoMode`.
pub(super) struct Passthrough {
    state: Mutex<State>,
    /// Woken at every release: an open waiting in `plan_waiting` looks again.
    released: tokio::sync::Notify,
}

/// How an open uses the file, as far as passthrough is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenAccess {
    Read,
    /// Write only (O_WRONLY): such a descriptor can never be mapped (mmap needs read
    /// access), so every change it makes is a `write` while it is open.
    Write,
    /// O_RDWR: the descriptor may be mapped shared and writable. Through passthrough the
    /// kernel maps the staged file itself, so `msync` never reaches flowfs and pages
    /// written after `close()` (the mapping outlives the descriptor) change a file
    /// flowfs has already uploaded, then handed to the cache (issue 26: lost at unmount,
    /// 5 of 5 files). Served through flowfs, the kernel sends msync as fsync and the
    /// release only after `munmap`. So such an open starts its inode's mode through
    /// flowfs; only an inode already served from its staged file by another open takes
    /// it the same way (the kernel allows no mix).
    ReadWrite,
}

impl OpenAccess {
    /// From the flags of open or create.
    pub(super) fn of(flags: i32) -> OpenAccess {
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY if flags & libc::O_TRUNC == 0 => OpenAccess::Read,
            libc::O_RDWR => OpenAccess::ReadWrite,
            _ => OpenAccess::Write,
        }
    }
}

/// What an open may be, before the core opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Served by flowfs: no backing file is asked for.
    Flowfs,
    /// The core offers its backing file, if it has one.
    Offer,
    /// Refused (EBUSY), see `plan`.
    Refuse,
}

/// An open or create reply, served either way.
pub(super) trait OpenReply {
    fn backing(&self, file: &std::fs::File) -> std::io::Result<BackingId>;
    fn plain(self, fh: FileHandle, flags: FopenFlags);
    fn passthrough(self, fh: FileHandle, flags: FopenFlags, id: &BackingId);
    fn refuse(self, e: fuser::Errno);
}

impl OpenReply for ReplyOpen {
    fn backing(&self, file: &std::fs::File) -> std::io::Result<BackingId> {
        self.open_backing(file)
    }
    fn plain(self, fh: FileHandle, flags: FopenFlags) {
        self.opened(fh, flags);
    }
    fn passthrough(self, fh: FileHandle, flags: FopenFlags, id: &BackingId) {
        self.opened_passthrough(fh, kernel_flags(flags), id);
    }
    fn refuse(self, e: fuser::Errno) {
        self.error(e);
    }
}

/// A create's reply with the entry it carries.
pub(super) struct Created {
    pub reply: ReplyCreate,
    pub ttl: std::time::Duration,
    pub attr: fuser::FileAttr,
}

impl OpenReply for Created {
    fn backing(&self, file: &std::fs::File) -> std::io::Result<BackingId> {
        self.reply.open_backing(file)
    }
    fn plain(self, fh: FileHandle, flags: FopenFlags) {
        let g = Generation(0);
        self.reply.created(&self.ttl, &self.attr, g, fh, flags);
    }
    fn passthrough(self, fh: FileHandle, flags: FopenFlags, id: &BackingId) {
        let g = Generation(0);
        let flags = kernel_flags(flags);
        (self.reply).created_passthrough(&self.ttl, &self.attr, g, fh, flags, id);
    }
    fn refuse(self, e: fuser::Errno) {
        self.reply.error(e);
    }
}

impl Passthrough {
    pub(super) fn new(on: bool) -> Passthrough {
        let usage = if on { Use::On } else { Use::Off };
        Passthrough {
            state: Mutex::new(State {
                usage,
                inodes: HashMap::new(),
            }),
            released: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.state.lock().usage != Use::Off
    }

    /// The kernel does not offer passthrough: said once, and not asked for again.
    pub(super) fn unavailable(&self, why: &str) {
        let mut s = self.state.lock();
        if s.usage != Use::Off {
            tracing::warn!("FUSE passthrough unavailable ({why}): local files are read and written through flowfs (--passthrough off says it is meant)");
            s.usage = Use::Off;
        }
    }

    /// Whether an open of `ino` may be served by passthrough, asked before the core
    /// opens (`answer` decides with what the open offers). An open for writing is
    /// `Refuse`d while the inode's readers read the cache's file: its writes could go
    /// nowhere else, and refused before the core opens it, an O_TRUNC truncates nothing.
    /// An open for reading and writing starts its inode's mode through flowfs: see
    /// `OpenAccess::ReadWrite`.
    fn plan(&self, ino: u64, access: OpenAccess) -> Plan {
        let s = self.state.lock();
        match s.inodes.get(&ino) {
            Some(IoMode::Kernel { key, .. })
                if access != OpenAccess::Read && matches!(key, BackingKey::Cached(_)) =>
            {
                Plan::Refuse
            }
            Some(IoMode::Flowfs { .. }) => Plan::Flowfs,
            // Served from one file already: every open of the inode must be too.
            Some(IoMode::Kernel { .. }) => Plan::Offer,
            _ if s.usage == Use::Off || access == OpenAccess::ReadWrite => Plan::Flowfs,
            _ => Plan::Offer,
        }
    }

    /// `plan`, waiting up to `RELEASE_WAIT` for releases while it says `Refuse`.
    pub(super) async fn plan_waiting(&self, ino: u64, access: OpenAccess) -> Plan {
        let plan = || Some(self.plan(ino, access)).filter(|p| *p != Plan::Refuse);
        self.until_released(plan).await.unwrap_or(Plan::Refuse)
    }

    /// Waits up to `RELEASE_WAIT` while `ino` is served by the kernel from another file
    /// than the open offers (`key`): the handles of a process that has closed them but
    /// whose RELEASE the kernel sends after its `close()` returned. Without it `answer`
    /// refused such opens at once (`git config` 150 times over, each round renaming
    /// `config.lock` over `config`: EBUSY in about 1 run of 5).
    pub(super) async fn await_compatible(&self, ino: u64, key: Option<BackingKey>) {
        let fits = || {
            let s = self.state.lock();
            let clash = matches!(s.inodes.get(&ino),
                Some(IoMode::Kernel { key: k, .. }) if Some(*k) != key);
            (!clash).then_some(())
        };
        let _ = self.until_released(fits).await;
    }

    /// `check`'s first answer, asked again at each release, for at most `RELEASE_WAIT`
    /// (`None`: it never answered).
    async fn until_released<T>(&self, check: impl Fn() -> Option<T>) -> Option<T> {
        let released = crate::wait::until(&self.released, check);
        tokio::time::timeout(RELEASE_WAIT, released).await.ok()
    }

    /// Answers the open of `ino` (handle `fh`, offered `backing`) as its inode's mode
    /// allows, counting the handle. False: the open was refused with EBUSY (its inode is
    /// served from another file, as the kernel cannot mix), and the caller closes `fh`.
    pub(super) fn answer<R: OpenReply>(
        &self,
        ino: u64,
        reply: R,
        fh: FileHandle,
        flags: FopenFlags,
        backing: Option<&Backing>,
    ) -> bool {
        let mut s = self.state.lock();
        let off = s.usage == Use::Off;
        match s.inodes.get_mut(&ino) {
            Some(IoMode::Flowfs { handles }) => {
                *handles += 1;
                drop(s);
                reply.plain(fh, flags);
            }
            Some(IoMode::Kernel { key, id, handles }) => {
                if backing.map(Backing::key) != Some(*key) {
                    drop(s);
                    tracing::debug!(
                        ino,
                        "open refused: the inode is passed through to another file"
                    );
                    reply.refuse(fuser::Errno::EBUSY);
                    return false;
                }
                *handles += 1;
                let id = id.clone();
                drop(s);
                reply.passthrough(fh, flags, &id);
            }
            None if off => {
                // Never again served by the kernel: nothing to keep apart.
                drop(s);
                reply.plain(fh, flags);
            }
            None => {
                // The first open decides the inode's mode.
                let id = register(&mut s, &reply, backing);
                let mode = match &id {
                    Some((key, id)) => IoMode::Kernel {
                        key: *key,
                        id: id.clone(),
                        handles: 1,
                    },
                    None => IoMode::Flowfs { handles: 1 },
                };
                s.inodes.insert(ino, mode);
                drop(s);
                match id {
                    Some((_, id)) => reply.passthrough(fh, flags, &id),
                    None => reply.plain(fh, flags),
                }
            }
        }
        true
    }

    /// A handle of `ino` was released; the last one ends its mode (and lets the kernel
    /// drop its registration of the backing file).
    pub(super) fn released(&self, ino: u64) {
        let mut s = self.state.lock();
        let last = match s.inodes.get_mut(&ino) {
            Some(IoMode::Flowfs { handles } | IoMode::Kernel { handles, .. }) => {
                *handles = handles.saturating_sub(1);
                *handles == 0
            }
            None => false,
        };
        if last {
            s.inodes.remove(&ino);
        }
        drop(s);
        self.released.notify_waiters();
    }
}

/// The flags a passthrough open may carry. The kernel fails the open (EIO) when any other
/// is set (FOPEN_PASSTHROUGH_MASK, fs/fuse/iomode.c): FOPEN_KEEP_CACHE, which a reopened
/// unchanged object gets, failed every passthrough open of a cached file.
fn kernel_flags(flags: FopenFlags) -> FopenFlags {
    flags & (FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_DIRECT_IO)
}

/// The first open of an inode: its backing file registered with the kernel, when there
/// is one and passthrough is on.
fn register<R: OpenReply>(
    s: &mut State,
    reply: &R,
    backing: Option<&Backing>,
) -> Option<(BackingKey, Arc<BackingId>)> {
    let b = backing.filter(|_| s.usage != Use::Off)?;
    match reply.backing(b.file()) {
        Ok(id) => {
            if s.usage == Use::On {
                tracing::info!(
                    "FUSE passthrough in use: the kernel reads and writes local files itself"
                );
                s.usage = Use::Serving;
            }
            Some((b.key(), Arc::new(id)))
        }
        Err(e) => {
            refused(s, &e);
            None
        }
    }
}

/// The kernel refused to register a backing file (no CAP_SYS_ADMIN, a backing file on a
/// file system stacked too deep): every later open would be refused alike.
fn refused(s: &mut State, e: &std::io::Error) {
    tracing::warn!("FUSE passthrough refused by the kernel ({e}; it needs CAP_SYS_ADMIN): local files are read and written through flowfs (--passthrough off says it is meant)");
    s.usage = Use::Off;
}
