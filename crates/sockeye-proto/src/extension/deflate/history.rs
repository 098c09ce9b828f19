//! The plaintext a compression context covers, kept so that a pooled state lent without its
//! context can be primed with it (RFC 7692 §7.1.1: the peer still holds that window).

use std::collections::VecDeque;

/// The plaintext a compression context covers (the last 2^bits bytes since it started), kept so
/// that a pooled state can be primed with it. A ring: appending a small message to a full window
/// costs its own length, not the window's.
#[derive(Debug, Default)]
pub(super) struct History {
    pub(super) bytes: VecDeque<u8>,
    pub(super) window: usize,
}

impl History {
    pub(super) fn new(bits: u8) -> Self {
        History {
            bytes: VecDeque::new(),
            window: 1 << bits,
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(self.window)..];
        let excess = (self.bytes.len() + data.len()).saturating_sub(self.window);
        self.bytes.drain(..excess);
        let needed = self.bytes.len() + data.len();
        if needed > self.bytes.capacity() {
            // Grow geometrically but never past the window.
            let target = (self.bytes.capacity() * 2).clamp(needed, self.window.max(needed));
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend(data);
    }

    pub(super) fn clear(&mut self) {
        self.bytes.clear();
    }

    pub(super) fn contiguous(&mut self) -> &[u8] {
        self.bytes.make_contiguous()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The history keeps exactly the last window of what went through, whatever the sizes.
    #[test]
    fn history_keeps_the_last_window() {
        let mut h = History::new(9);
        let mut all = Vec::new();
        for (i, len) in [0usize, 100, 300, 200, 512, 700, 1, 511, 3]
            .into_iter()
            .enumerate()
        {
            let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            h.push(&data);
            all.extend_from_slice(&data);
            let want = &all[all.len().saturating_sub(512)..];
            assert_eq!(h.contiguous(), want);
            assert!(h.bytes.capacity() <= 1024, "capacity {}", h.bytes.capacity());
        }
    }

    proptest! {
        /// The history keeps exactly the last window of what went through, read at any point.
        #[test]
        fn history_matches_the_last_window_of_everything_pushed(
            pushes in proptest::collection::vec((0usize..700, any::<bool>()), 1..30),
        ) {
            let mut h = History::new(9);
            let mut all = Vec::new();
            for (i, (len, read)) in pushes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| (i * 131 + j * 7) as u8).collect();
                h.push(&data);
                all.extend_from_slice(&data);
                if read {
                    let want = &all[all.len().saturating_sub(512)..];
                    prop_assert_eq!(h.contiguous(), want);
                }
                prop_assert_eq!(h.bytes.len(), all.len().min(512));
                prop_assert!(h.bytes.capacity() <= 1024);
            }
        }
    }
}
