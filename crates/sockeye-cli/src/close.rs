//! Close frames the servers build from a message of any length (an error's text, a topic name).
//! A leaf: `relay` and `proxy_server` use it.

use sockeye::{CloseCode, CloseFrame};

/// A close frame whose reason is cut to what a close frame carries (123 bytes, on a character
/// boundary).
pub(crate) fn short_close(code: CloseCode, reason: &str) -> CloseFrame {
    let mut end = reason.len().min(CloseFrame::MAX_REASON_LEN);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    CloseFrame::new(code, reason[..end].to_string())
}

#[cfg(test)]
mod tests {
    use sockeye::{CloseCode, CloseFrame};

    use super::short_close;

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        assert_eq!(short_close(CloseCode::NORMAL, "bye").reason.as_str(), "bye");
        let long = "é".repeat(100);
        let frame = short_close(CloseCode::GOING_AWAY, &long);
        assert_eq!(frame.reason.len(), CloseFrame::MAX_REASON_LEN - 1);
        assert!(long.starts_with(frame.reason.as_str()));
    }
}
