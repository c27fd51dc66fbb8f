//! Failures proptest shrank, pinned as named sequences.

use super::run;
use super::Step;

/// A file not uploaded yet, renamed over another client's object and then unlinked, left
/// that object in the bucket: the unlink thought nothing of the file had been uploaded.
#[test]
fn an_unlinked_file_renamed_over_a_remote_object_takes_it_along() {
    use Step::*;
    run(&[
        Create(0),
        RemotePut {
            name: 3,
            len: 0,
            seed: 0,
        },
        Rename(0, 3),
        Unlink(3),
    ]);
}

/// An early upload dropped by a change to its sent bytes was aborted by a task the
/// unmount did not wait for: the upload stayed open in the bucket.
#[test]
fn an_early_upload_given_up_is_aborted_before_unmount_returns() {
    use Step::*;
    run(&[
        Create(0),
        Write {
            h: 0,
            off: 107_669,
            len: 23_403,
            seed: 0,
        },
        Write {
            h: 0,
            off: 0,
            len: 1,
            seed: 0,
        },
    ]);
}

/// `flowfs unmount` reported a failed upload of a name the file had left: the failure
/// was kept by key, and the file, renamed, went up under its new name.
#[test]
fn a_failure_before_a_rename_is_not_reported_once_the_file_is_uploaded() {
    use Step::*;
    run(&[Create(0), Create(0), FailNextUpload, Fsync(0), Rename(0, 1)]);
}

/// A file created over another client's object and renamed, then looked up once the TTL
/// had passed: the lookup asked the bucket by name (a HEAD and a one-key LIST, no longer
/// a listing merged with what is staged here), which holds nothing under the new name
/// before the upload.
#[test]
fn a_staged_file_renamed_is_found_by_a_lookup_after_the_ttl() {
    use Step::*;
    run(&[
        RemotePut {
            name: 0,
            len: 0,
            seed: 0,
        },
        Create(0),
        Rename(0, 1),
    ]);
}

/// A file staged by a truncate whose upload failed, renamed, then its attributes asked
/// after the TTL: the bucket had nothing under its new name.
#[test]
fn a_staged_file_renamed_after_a_failed_upload_keeps_its_attributes() {
    use Step::*;
    run(&[
        RemotePut {
            name: 2,
            len: 0,
            seed: 0,
        },
        TruncatePath { name: 2, size: 0 },
        FailNextUpload,
        Rename(2, 0),
    ]);
}

/// A file changed by a truncate (its upload queued, not yet sent), then forgotten by the
/// kernel (`drop_caches`): the node went with the kernel's last reference, and the next
/// lookup made a new one from the bucket's older copy, its size and bytes, while the
/// change was still on its way up.
#[test]
fn a_changed_file_the_kernel_forgot_shows_its_change_until_it_is_uploaded() {
    use Step::*;
    run(&[Create(3), Crash, TruncatePath { name: 3, size: 1 }, Forget]);
}
