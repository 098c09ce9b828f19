//! The frame header parser (RFC 6455 §5.2) on arbitrary bytes: never panics, never claims more
//! bytes than it was given, and a parsed header re-encodes to a header that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sockeye_proto::frame::{FrameHeader, MAX_HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(Some((header, len))) = FrameHeader::parse(data) else {
        return;
    };
    assert!((2..=MAX_HEADER_LEN).contains(&len) && len <= data.len());
    // A prefix shorter than the header is "incomplete", never an error or a different header.
    for cut in 0..len {
        assert_eq!(FrameHeader::parse(&data[..cut]), Ok(None), "prefix of {cut} bytes");
    }
    let mut out = [0u8; MAX_HEADER_LEN];
    let n = header.encode(&mut out);
    assert_eq!(n, header.encoded_len());
    // The encoding is minimal, so it is never longer than what was parsed.
    assert!(n <= len);
    assert_eq!(FrameHeader::parse(&out[..n]), Ok(Some((header, n))));
});
