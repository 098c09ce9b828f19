//! Jittered exponential backoff, written once: the [`ReconnectingClient`](crate::ReconnectingClient)'s
//! reconnections, the pub/sub backplanes' reconnections and publish retries, and the `ws` tool's
//! waits for a backplane all draw their waits here. A leaf: it knows no connection.
//!
//! The wait before retry number `n` (0 for the first) has the nominal value
//! `first × multiplier^n`, capped at `max`, and is drawn uniformly from a range around it that
//! the [`Jitter`] sets, so that many clients that lost the same server at the same moment do not
//! all come back in step (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
//!
//! ```
//! use std::time::Duration;
//! use sockeye::backoff::{Backoff, Jitter};
//!
//! let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
//! assert_eq!(backoff.delay_range(0), (Duration::from_millis(25), Duration::from_millis(50)));
//! assert_eq!(backoff.delay_range(9), (Duration::from_millis(500), Duration::from_secs(1)));
//! let exact = backoff.jitter(Jitter::None);
//! assert_eq!(exact.random_delay(1), Duration::from_millis(100));
//! ```

use std::time::Duration;

/// How the random part of the wait is drawn from the nominal delay `d` (see
/// [`Backoff::delay_range`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// "Equal jitter": uniformly in `[d/2, d]`. Clients that lost the same server at the same
    /// moment spread out, and each still backs off by at least half the nominal delay.
    #[default]
    Equal,
    /// "Full jitter": uniformly in `[0, d]`.
    Full,
    /// No jitter: exactly `d`.
    None,
}

/// A jittered exponential backoff. Build it with [`new`](Self::new) and the setters; the
/// defaults are the [`ReconnectingClient`](crate::ReconnectingClient)'s (100 ms doubling to
/// 30 s, equal jitter).
///
/// Any settings give waits, never a panic (the fields are public): a nominal delay past `max`
/// (an overflow to infinity included) is `max` itself, whatever its size (`Duration::MAX` too),
/// and a multiplier below 1 or that is not a number counts as 1.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Backoff {
    /// The nominal wait before the first retry (default 100 ms).
    pub first: Duration,
    /// Each further retry multiplies the nominal wait by this (default 2).
    pub multiplier: f64,
    /// The nominal wait never exceeds this (default 30 s).
    pub max: Duration,
    /// How the actual wait is drawn from the nominal one (default [`Jitter::Equal`]).
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(30))
    }
}

impl Backoff {
    /// Starts at `first`, doubles up to `max`, with [`Jitter::Equal`].
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            multiplier: 2.0,
            max,
            jitter: Jitter::Equal,
        }
    }

    /// The nominal wait before the first retry.
    #[must_use]
    pub const fn first(mut self, delay: Duration) -> Self {
        self.first = delay;
        self
    }

    /// The growth of the nominal wait per retry (values below 1 are taken as 1).
    #[must_use]
    pub fn multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = if multiplier >= 1.0 { multiplier } else { 1.0 };
        self
    }

    /// The cap on the nominal wait.
    #[must_use]
    pub const fn max(mut self, delay: Duration) -> Self {
        self.max = delay;
        self
    }

    /// The jitter.
    #[must_use]
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The bounds of the wait before retry number `retry` (0 for the first): the nominal delay
    /// is `first × multiplier^retry`, capped at `max`; the wait is drawn uniformly between the
    /// bounds this returns, `[d/2, d]` with [`Jitter::Equal`], `[0, d]` with [`Jitter::Full`],
    /// `[d, d]` without jitter.
    pub fn delay_range(&self, retry: u32) -> (Duration, Duration) {
        let nominal = self.nominal_delay(retry);
        match self.jitter {
            Jitter::Equal => (nominal / 2, nominal),
            Jitter::Full => (Duration::ZERO, nominal),
            Jitter::None => (nominal, nominal),
        }
    }

    /// `first × multiplier^retry`, capped at `max`.
    fn nominal_delay(&self, retry: u32) -> Duration {
        let first = self.first.min(self.max);
        if first.is_zero() {
            return Duration::ZERO;
        }
        let exponent = i32::try_from(retry).unwrap_or(i32::MAX);
        // `max` takes 1 for NaN: `f64::max` returns the operand that is a number.
        secs_at_most(
            first.as_secs_f64() * self.multiplier.max(1.0).powi(exponent),
            self.max,
        )
    }

    /// The wait before retry number `retry`, `unit` (in `[0, 1]`, clamped) placing it between
    /// the bounds of [`delay_range`](Self::delay_range): pass a uniform random number (or use
    /// [`random_delay`](Self::random_delay)); a fixed one makes the wait repeatable in a test.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let (low, high) = self.delay_range(retry);
        let unit = if unit.is_nan() { 0.0 } else { unit.clamp(0.0, 1.0) };
        let span = high - low;
        // Not `mul_f64`: it panics where `span`'s seconds round up past what a `Duration` holds.
        low + secs_at_most(span.as_secs_f64() * unit, span)
    }

    /// The wait before retry number `retry`, drawn at random between the bounds of
    /// [`delay_range`](Self::delay_range).
    pub fn random_delay(&self, retry: u32) -> Duration {
        self.delay(retry, rand::random::<f64>())
    }
}

/// `secs` seconds as a `Duration`, at most `cap`: a value past the cap, or one no `Duration`
/// holds (infinite, not a number, or `Duration::MAX`'s seconds rounded up to 2^64 as an `f64`),
/// is `cap` itself. `Duration::from_secs_f64` and `mul_f64` panic there.
fn secs_at_most(secs: f64, cap: Duration) -> Duration {
    Duration::try_from_secs_f64(secs).map_or(cap, |d| d.min(cap))
}
