//! [`Link`]: what the handles and the driver share — the open connection's sending half, or,
//! while there is none, the offline queue.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use sockeye_proto::Message;

use super::config::Offline;
use super::send_error::SendError;
use crate::split::WebSocketWriter;
use crate::stream::TransportStream;

/// What the handles and the driver share: the open connection's sending half, or the queue.
pub(super) struct Link {
    pub(super) writer: Option<WebSocketWriter<TransportStream>>,
    pub(super) queue: VecDeque<Message>,
    pub(super) queued_bytes: usize,
    pub(super) offline: Offline,
    pub(super) ended: bool,
}

impl Link {
    /// A message sent while disconnected: queued or refused.
    pub(super) fn offline(&mut self, message: Message) -> Result<(), SendError> {
        match self.offline {
            Offline::Refuse => Err(SendError::NotConnected(message)),
            Offline::Queue {
                max_messages,
                max_bytes,
            } => {
                let len = message.as_payload().len();
                if self.queue.len() >= max_messages || self.queued_bytes.saturating_add(len) > max_bytes {
                    return Err(SendError::QueueFull(message));
                }
                self.queued_bytes += len;
                self.queue.push_back(message);
                Ok(())
            }
        }
    }
}

/// Locks the link; never held across an `await`, so a poisoned lock is as consistent as any.
pub(super) fn lock(link: &Mutex<Link>) -> MutexGuard<'_, Link> {
    link.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
