//! Payload masking, RFC 6455 §5.3: `out[i] = in[i] ^ key[i % 4]`.

/// Mask keys from a fixed-seed generator (xorshift32): the same keys on every run, which tests
/// and benchmarks want and which RFC 6455 §10.3 forbids on a real connection (an attacker who can
/// predict the keys can make a client's frames look like anything to a proxy). Never use it
/// outside tests; give a client the operating system's random source instead.
pub fn insecure_mask_keys_for_tests(seed: u32) -> crate::role::MaskKeySource {
    // xorshift32 never leaves zero: start from a non-zero state.
    let mut state = if seed == 0 { 0x9E37_79B9 } else { seed };
    Box::new(move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state.to_ne_bytes()
    })
}

/// XORs `buf` with the masking `key`, starting at position `offset` of the payload.
///
/// `offset` lets a payload be unmasked piece by piece as it arrives: call it with the number of payload
/// bytes already unmasked. Works eight bytes at a time; the compiler turns the loop into SIMD. This is
/// safe code: `chunks_exact_mut` and `u64::from_ne_bytes` compile to unaligned wide loads and stores, so
/// no `unsafe` is needed to reach the speed (see the `mask` micro-benchmark in `bench/`).
#[inline]
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    // Rotate the key so that index 0 of `buf` lines up with key byte `offset % 4`: as a word in
    // memory order, byte `r` moves to the front.
    let shift = 8 * (offset % 4) as u32;
    let key = u32::from_le_bytes(key).rotate_right(shift).to_le_bytes();
    // The key twice over, in memory order: the same in either byte order.
    let half = u64::from(u32::from_ne_bytes(key));
    let wide = half | half << 32;
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ wide).to_ne_bytes());
    }
    // The tail is shorter than 8 bytes and starts at a multiple of 8, hence at key index 0.
    for (byte, k) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition in RFC 6455 §5.3, byte by byte: the reference the fast version must equal.
    fn naive(buf: &mut [u8], key: [u8; 4], offset: usize) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b ^= key[(offset + i) % 4];
        }
    }

    #[test]
    fn rfc_example() {
        // §5.7: "Hello" masked with 37 fa 21 3d.
        let mut data = *b"Hello";
        apply_mask(&mut data, [0x37, 0xfa, 0x21, 0x3d], 0);
        assert_eq!(data, [0x7f, 0x9f, 0x4d, 0x51, 0x58]);
    }

    proptest! {
        #[test]
        fn equals_naive_at_every_alignment_and_offset(
            data in proptest::collection::vec(any::<u8>(), 0..100),
            key in any::<[u8; 4]>(),
            start in 0usize..16,
            offset in 0usize..8,
        ) {
            let start = start.min(data.len());
            let mut fast = data.clone();
            let mut slow = data.clone();
            apply_mask(&mut fast[start..], key, offset);
            naive(&mut slow[start..], key, offset);
            prop_assert_eq!(fast, slow);
        }

        #[test]
        fn masking_in_pieces_equals_masking_at_once(
            data in proptest::collection::vec(any::<u8>(), 0..100),
            key in any::<[u8; 4]>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let cut = cut.index(data.len() + 1);
            let mut whole = data.clone();
            apply_mask(&mut whole, key, 0);
            let mut pieces = data.clone();
            let (a, b) = pieces.split_at_mut(cut);
            apply_mask(a, key, 0);
            apply_mask(b, key, cut);
            prop_assert_eq!(whole, pieces);
        }
    }
}
