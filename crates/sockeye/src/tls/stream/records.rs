//! The send queue: records rustls writes (handshake flights, alerts, encrypted data) appended
//! to one buffer, `outgoing[out_start..out_end]`, grown or compacted when rustls needs room.

use std::io;

use rustls::unbuffered::{EncodeError, EncryptError};

use super::buffers::{self, FIRST_BUFFER};

/// Why rustls did not write a record into the room it was given.
pub(super) enum NoRecord {
    /// It needs this many bytes.
    Room(usize),
    /// It cannot (the record was encoded already, the keys are exhausted).
    Failed(io::Error),
}

impl From<EncodeError> for NoRecord {
    fn from(e: EncodeError) -> Self {
        match e {
            EncodeError::InsufficientSize(need) => NoRecord::Room(need.required_size),
            EncodeError::AlreadyEncoded => {
                NoRecord::Failed(io::Error::other("rustls: TLS record encoded twice"))
            }
        }
    }
}

impl From<EncryptError> for NoRecord {
    fn from(e: EncryptError) -> Self {
        match e {
            EncryptError::InsufficientSize(need) => NoRecord::Room(need.required_size),
            e => NoRecord::Failed(io::Error::other(format!("TLS: {e}"))),
        }
    }
}

/// Appends a record to the send queue `outgoing[out_start..out_end]`: `write` puts it into the
/// room after `out_end` (an encode, an encryption, a close_notify), tried again with more room
/// while rustls says it needs more.
pub(super) fn queue_record(
    outgoing: &mut Vec<u8>,
    out_start: &mut usize,
    out_end: &mut usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, NoRecord>,
) -> io::Result<()> {
    loop {
        match write(&mut outgoing[*out_end..]) {
            Ok(n) => {
                *out_end += n;
                return Ok(());
            }
            Err(NoRecord::Room(need)) => make_room(outgoing, out_start, out_end, need),
            Err(NoRecord::Failed(e)) => return Err(e),
        }
    }
}

/// Makes room for `need` more bytes after `outgoing[..out_end]`: the buffer moves its live bytes
/// to the front or grows (a new buffer comes from the pool).
fn make_room(outgoing: &mut Vec<u8>, out_start: &mut usize, out_end: &mut usize, need: usize) {
    if *out_start == *out_end {
        *out_start = 0;
        *out_end = 0;
    }
    if outgoing.is_empty() {
        *outgoing = buffers::take();
    }
    if outgoing.len() - *out_end >= need {
        return;
    }
    if *out_start > 0 {
        outgoing.copy_within(*out_start..*out_end, 0);
        *out_end -= *out_start;
        *out_start = 0;
    }
    let wanted = *out_end + need;
    if outgoing.len() < wanted {
        outgoing.resize(wanted.max(FIRST_BUFFER).next_power_of_two(), 0);
    }
}
