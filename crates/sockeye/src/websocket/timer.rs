//! The one timer of a connection: a `Sleep` set to the engine's next deadline, and the waker it
//! will wake.

use std::pin::Pin;
use std::task::{Context, Waker};

use tokio::time::{Instant, Sleep};

/// The one timer of a connection, and the waker it will wake.
pub(super) struct EngineTimer {
    sleep: Pin<Box<Sleep>>,
    /// The waker the sleep was last polled with. The keepalive deadline stays put while messages
    /// flow (the engine only notes that input arrived), so a connection that waits after every
    /// message would poll the same sleep with the same waker each time; tokio then re-registers
    /// the waker under its lock for nothing (~90 instructions of a 64-byte echo, callgrind).
    waker: Option<Waker>,
}

impl EngineTimer {
    /// A timer for `deadline`, not yet polled.
    pub(super) fn new(deadline: Instant) -> Self {
        EngineTimer {
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
            waker: None,
        }
    }

    /// The deadline it is set for.
    #[inline]
    pub(super) fn deadline(&self) -> Instant {
        self.sleep.deadline()
    }

    /// Whether the sleep is registered for `deadline` with `cx`'s waker and has not fired:
    /// nothing to redo.
    #[inline(always)]
    pub(super) fn is_set(&self, deadline: Instant, cx: &Context<'_>) -> bool {
        self.sleep.deadline() == deadline
            && !self.sleep.is_elapsed()
            && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
    }

    /// Whether `deadline` has passed; if not, `cx` will be woken when it does. For a timer that is
    /// not [set](Self::is_set) as asked.
    pub(super) fn elapsed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return true;
        }
        match &mut self.waker {
            Some(w) => w.clone_from(cx.waker()),
            None => self.waker = Some(cx.waker().clone()),
        }
        false
    }
}
