//! The one backoff (`sockeye::backoff`): the waits it draws, for the reconnecting client, the
//! pub/sub backplanes and every retry loop of the `ws` tool.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sockeye::backoff::{Backoff, Jitter};

#[test]
fn the_delay_doubles_up_to_the_cap_within_the_jitter_bounds() {
    let ms = Duration::from_millis;
    let config = Backoff::default();
    // Equal jitter: [d/2, d], d = 100 ms × 2^retry, capped at 30 s.
    let expected = [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000];
    for (retry, nominal) in expected.into_iter().enumerate() {
        let retry = retry as u32;
        assert_eq!(
            config.delay_range(retry),
            (ms(nominal / 2), ms(nominal)),
            "retry {retry}"
        );
        assert_eq!(config.delay(retry, 0.0), ms(nominal / 2));
        assert_eq!(config.delay(retry, 1.0), ms(nominal));
        assert_eq!(config.delay(retry, 0.5), ms(nominal * 3 / 4));
    }
    // Far past the cap, no overflow.
    assert_eq!(config.delay_range(u32::MAX).1, Duration::from_secs(30));
    // Out-of-range draws are clamped.
    assert_eq!(config.delay(0, 7.0), ms(100));
    assert_eq!(config.delay(0, -1.0), ms(50));
    // Random draws stay within the bounds.
    for retry in 0..12 {
        let (low, high) = config.delay_range(retry);
        for _ in 0..100 {
            let d = config.random_delay(retry);
            assert!(
                low <= d && d <= high,
                "retry {retry}: {d:?} outside {low:?}..={high:?}"
            );
        }
    }
    let full = config.jitter(Jitter::Full);
    assert_eq!(full.delay_range(2), (Duration::ZERO, ms(400)));
    let none = config.jitter(Jitter::None).multiplier(3.0).max(ms(1000));
    assert_eq!(none.delay_range(0), (ms(100), ms(100)));
    assert_eq!(none.delay_range(1), (ms(300), ms(300)));
    assert_eq!(none.delay_range(2), (ms(900), ms(900)));
    assert_eq!(none.delay_range(3), (ms(1000), ms(1000)));
    // A multiplier below 1 would shrink the wait: taken as 1.
    assert_eq!(config.multiplier(0.5).delay_range(5), (ms(50), ms(100)));
}

proptest::proptest! {
    /// Whatever the settings (the fields are public: a multiplier that is infinite or not a
    /// number, `Duration::MAX` as the cap or the first delay), the bounds exist, hold the draw,
    /// never pass the cap, and never shrink from one retry to the next.
    #[test]
    fn any_settings_give_delays_within_the_cap_and_never_panic(
        first_nanos in proptest::prelude::any::<u64>(),
        first_secs in proptest::prop_oneof![proptest::prelude::Just(0u64), 0..100u64, proptest::prelude::Just(u64::MAX)],
        max_secs in proptest::prop_oneof![proptest::prelude::Just(u64::MAX), 0..1_000_000u64, proptest::prelude::any::<u64>()],
        multiplier in proptest::prop_oneof![
            proptest::prelude::Just(f64::INFINITY), proptest::prelude::Just(f64::NAN),
            proptest::prelude::Just(f64::MAX), proptest::prelude::Just(-3.0), 0.0..1e6f64,
        ],
        jitter in proptest::sample::select(vec![Jitter::Equal, Jitter::Full, Jitter::None]),
        retry in proptest::prop_oneof![0..70u32, proptest::prelude::any::<u32>()],
        unit in proptest::prelude::any::<f64>(),
    ) {
        let mut config = Backoff::default().jitter(jitter);
        config.first = Duration::new(first_secs, (first_nanos % 1_000_000_000) as u32);
        config.max = Duration::new(max_secs, (first_nanos / 7 % 1_000_000_000) as u32);
        config.multiplier = multiplier;
        let (low, high) = config.delay_range(retry);
        proptest::prop_assert!(low <= high && high <= config.max, "{low:?} {high:?} {config:?}");
        let d = config.delay(retry, unit);
        proptest::prop_assert!(low <= d && d <= high, "{d:?} outside {low:?}..={high:?}");
        let (_, next_high) = config.delay_range(retry.saturating_add(1));
        proptest::prop_assert!(high <= next_high, "retry {retry}: {high:?} then {next_high:?}");
    }
}
