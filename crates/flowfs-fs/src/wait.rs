//! The one way this crate waits for a state another task changes: look, and if it is not
//! there yet, sleep until that task's `Notify` wakes its waiters, then look again.

use tokio::sync::Notify;

/// `check`'s first `Some`, asked again each time `notify` wakes its waiters. The wake is
/// registered before each look, so that one in between the look and the sleep is not
/// missed (`notify_waiters` keeps no permit for a waiter that was not registered).
pub(crate) async fn until<T>(notify: &Notify, mut check: impl FnMut() -> Option<T>) -> T {
    loop {
        let woken = notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if let Some(t) = check() {
            return t;
        }
        woken.await;
    }
}
