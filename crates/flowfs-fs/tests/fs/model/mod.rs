//! A reference model of what docs/SEMANTICS.md promises, checked by property tests
//! (issue 13): random sequences of operations run on the core over the in-memory store
//! and on a plain model (paths → files → bytes, and the directories made by `mkdir`),
//! compared after every step, and the bucket compared with the model after the last one.
//!
//! Each mount runs on its own single-threaded runtime, so background uploads progress only
//! where the sequence says (`Yield`), and a crash is the runtime and the `Fs` dropped at
//! that point. A close is the FUSE close: `flush` now, `release` later, when the sequence
//! delivers it (the kernel sends RELEASE after close() has returned). Names live at the
//! root and in two directories, which are made, removed and renamed (with what is staged
//! below them) as the sequence says. A file may have several names (`Link`). Failures that
//! proptest shrinks are pinned as named tests in pinned.rs.

mod checks;
mod names;
mod pinned;
mod world;

use proptest::prelude::*;

use world::World;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// The directories below the root that the sequence may make (never a file's name).
const DIRS: [&str; 2] = ["x", "y"];
/// Small parts, so that multipart and early uploads happen with small files.
const PART: u64 = 64 << 10;

/// The path of file name `p`: `NAMES[p]` at the root for `p < 4`, then the same names in
/// each of `DIRS`.
fn path(p: usize) -> String {
    let leaf = NAMES[p % NAMES.len()];
    match p / NAMES.len() {
        0 => leaf.to_string(),
        d => format!("{}/{leaf}", DIRS[(d - 1) % DIRS.len()]),
    }
}

/// A path's directory (`None`: the root) and its last name.
fn split(path: &str) -> (Option<&str>, &str) {
    match path.split_once('/') {
        Some((d, leaf)) => (Some(d), leaf),
        None => (None, path),
    }
}

#[derive(Debug, Clone)]
pub enum Step {
    Create(usize),
    Open {
        name: usize,
        write: bool,
        trunc: bool,
    },
    Write {
        h: usize,
        off: u32,
        len: u16,
        seed: u8,
    },
    Read {
        h: usize,
    },
    Truncate {
        h: usize,
        size: u32,
    },
    TruncatePath {
        name: usize,
        size: u32,
    },
    Fsync(usize),
    Close(usize),
    DeliverRelease(usize),
    Rename(usize, usize),
    /// `link(a, b)`: one more name for a file (hard links, inode/links.rs).
    Link(usize, usize),
    Unlink(usize),
    Mkdir(usize),
    Rmdir(usize),
    /// `rename` of one of `DIRS` onto another: everything below it moves, what is staged
    /// included.
    RenameDir(usize, usize),
    RemotePut {
        name: usize,
        len: u16,
        seed: u8,
    },
    /// Another client deletes an object this mount never changed and has no handle on.
    RemoteDelete(usize),
    FailNextUpload,
    Yield(u8),
    /// The kernel drops its dentries (`drop_caches`, memory pressure): it forgets every
    /// inode no open file holds.
    Forget,
    Crash,
}

/// A file name: at the root or below one of `DIRS`, one as likely as the other.
fn name() -> impl Strategy<Value = usize> + Clone {
    let n = NAMES.len();
    prop_oneof![0..n, n..n * (DIRS.len() + 1)]
}

fn step() -> impl Strategy<Value = Step> {
    let n = name();
    let h = 0usize..4;
    let d = 0..DIRS.len();
    prop_oneof![
        2 => n.clone().prop_map(Step::Create),
        3 => (n.clone(), any::<bool>(), any::<bool>())
            .prop_map(|(name, write, trunc)| Step::Open { name, write, trunc }),
        6 => (h.clone(), 0u32..200_000, 1u16..40_000, any::<u8>())
            .prop_map(|(h, off, len, seed)| Step::Write { h, off, len, seed }),
        2 => h.clone().prop_map(|h| Step::Read { h }),
        2 => (h.clone(), 0u32..200_000).prop_map(|(h, size)| Step::Truncate { h, size }),
        1 => (n.clone(), 0u32..200_000).prop_map(|(name, size)| Step::TruncatePath { name, size }),
        2 => h.clone().prop_map(Step::Fsync),
        4 => h.clone().prop_map(Step::Close),
        3 => (0usize..4).prop_map(Step::DeliverRelease),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Step::Rename(a, b)),
        2 => (n.clone(), n.clone()).prop_map(|(a, b)| Step::Link(a, b)),
        1 => n.clone().prop_map(Step::Unlink),
        2 => d.clone().prop_map(Step::Mkdir),
        1 => d.clone().prop_map(Step::Rmdir),
        2 => (d.clone(), d).prop_map(|(a, b)| Step::RenameDir(a, b)),
        1 => (n.clone(), 0u16..20_000, any::<u8>())
            .prop_map(|(name, len, seed)| Step::RemotePut { name, len, seed }),
        1 => n.prop_map(Step::RemoteDelete),
        1 => Just(Step::FailNextUpload),
        3 => (1u8..20).prop_map(Step::Yield),
        1 => Just(Step::Forget),
        1 => Just(Step::Crash),
    ]
}

/// A sequence, half of them begun in a directory already made (names below a directory
/// are otherwise seldom used before the sequence ends).
fn steps() -> impl Strategy<Value = Vec<Step>> {
    (any::<bool>(), proptest::collection::vec(step(), 1..40)).prop_map(|(made, mut steps)| {
        if made {
            steps.insert(0, Step::Mkdir(0));
        }
        steps
    })
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn run(steps: &[Step]) {
    let mut w = World::new();
    for s in steps {
        w.apply(s);
        w.check_names();
    }
    w.check_bucket();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn the_core_behaves_as_the_model(steps in steps()) {
        run(&steps);
    }
}
