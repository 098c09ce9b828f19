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
/// bytes already unmasked. This is safe code that the compiler turns into SIMD: whole blocks of
/// 256, then 64 bytes are XORed with the key repeated to the block's length, a fixed-size array loop
/// that LLVM unrolls into 16-byte vector loads, XORs and stores (SSE2 on any x86-64; 32-byte ones
/// with AVX2 under `-C target-cpu`); the tail goes eight bytes at a time, then byte by byte. (The
/// eight-byte loop alone spent 0.28 instructions per byte, 4,600 of the echo server's 9,000 per
/// 16 KiB round trip; blocks spend 0.20 on x86-64's baseline, 1,275 fewer per echo. See the `mask`
/// micro-benchmark in `bench/`.)
///
/// Always inlined: where LLVM chose a call instead (it moves with the crate's layout), the
/// short-message path lost its constant offset and a 64-byte echo cost ~40 instructions more
/// (callgrind, issue 31).
#[inline(always)]
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    // Rotate the key so that index 0 of `buf` lines up with key byte `offset % 4`: as a word in
    // memory order, byte `r` moves to the front.
    let shift = 8 * (offset % 4) as u32;
    let key = u32::from_le_bytes(key).rotate_right(shift).to_le_bytes();
    // Every block and word below starts at a multiple of 4 from `buf[0]`, hence at key index 0:
    // one repeated key serves them all.
    let half = u64::from(u32::from_ne_bytes(key));
    let word_key = (half | half << 32).to_ne_bytes();
    let mut rest = buf;
    if rest.len() >= LARGE_BLOCK {
        rest = xor_blocks(rest, &repeat::<LARGE_BLOCK>(word_key));
    }
    if rest.len() >= SMALL_BLOCK {
        rest = xor_blocks(rest, &repeat::<SMALL_BLOCK>(word_key));
    }
    let (words, tail) = rest.as_chunks_mut::<8>();
    for word in words {
        *word = (u64::from_ne_bytes(*word) ^ u64::from_ne_bytes(word_key)).to_ne_bytes();
    }
    for (byte, k) in tail.iter_mut().zip(key.into_iter().cycle()) {
        *byte ^= k;
    }
}

/// The bytes [`apply_mask`] XORs as one unrolled block in a long payload: sixteen 16-byte vectors
/// (eight with AVX2), so that the loop's own count, compare and branch (three instructions) are
/// paid once per 256 bytes; with 64-byte blocks they were a fifth of the work.
const LARGE_BLOCK: usize = 256;

/// The block for what is left (and for a short message, where filling a 256-byte key would cost
/// more than it saves): four vectors.
const SMALL_BLOCK: usize = 64;

/// XORs every whole `N`-byte block at the front of `buf` with `key` (the masking key repeated to
/// `N` bytes, starting at key index 0) and returns the rest, shorter than `N`. A fixed-size
/// array loop: LLVM unrolls it into vector loads, XORs and stores.
#[inline]
fn xor_blocks<'a, const N: usize>(buf: &'a mut [u8], key: &[u8; N]) -> &'a mut [u8] {
    let (blocks, rest) = buf.as_chunks_mut::<N>();
    for block in blocks {
        for (byte, k) in block.iter_mut().zip(key) {
            *byte ^= k;
        }
    }
    rest
}

/// `word` repeated to `N` bytes (`N` a multiple of 8), filled a word at a time: byte by byte, the
/// fill cost more than masking a 64-byte message.
#[inline]
fn repeat<const N: usize>(word: [u8; 8]) -> [u8; N] {
    let mut out = [0u8; N];
    for chunk in out.as_chunks_mut::<8>().0 {
        *chunk = word;
    }
    out
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
            data in proptest::collection::vec(any::<u8>(), 0..300),
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
            data in proptest::collection::vec(any::<u8>(), 0..300),
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
