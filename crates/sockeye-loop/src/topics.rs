//! Topics (uWebSockets' subscribe and publish), and what reaches a loop thread from elsewhere.
//!
//! Each loop thread keeps its own table: topic → the connections of that thread subscribed to
//! it. A publication is encoded once ([`PreparedMessage`]: the frame's bytes, and its deflated
//! form per parameter set, shared by every subscriber) and handed to every thread: to this one's
//! queue directly, to the others' through their inboxes (a mutex-guarded list each, and a byte
//! on the thread's wake-up pipe when the list was empty). A thread delivers what is queued once
//! per turn, after its handlers ran and before it writes, so a publication made in a handler
//! goes out with that turn's writes.
//!
//! The table is the thread's (a thread-local, set up by the loop before its first turn): the
//! handler's `Socket` reaches it without the loop threading it through every call.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use sockeye_proto::{Message, PreparedMessage};

/// The longest topic name, in bytes.
pub const MAX_TOPIC_LEN: usize = 256;
/// Topics one connection may be subscribed to at once.
pub const MAX_TOPICS_PER_SOCKET: usize = 1024;
/// Publications and sends waiting in one loop thread's inbox, at most: beyond, the thread's
/// subscribers miss them (the publisher is told, [`PublishError::Overloaded`]).
pub const INBOX_LIMIT: usize = 65_536;

/// A connection of a server, as code outside its handler names it ([`Socket::id`](crate::Socket::id)):
/// the thread, the slot, and a serial that a later connection in the same slot does not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketId {
    pub(crate) thread: u32,
    pub(crate) key: u32,
    pub(crate) serial: u64,
}

impl SocketId {
    /// The loop thread the connection lives on (0 to the server's threads - 1).
    pub fn thread(&self) -> usize {
        self.thread as usize
    }
}

/// Why a publication (or a send through a [`ServerHandle`](crate::ServerHandle)) did not reach
/// everyone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PublishError {
    /// Only text and binary messages are published.
    NotData,
    /// The topic name is empty or longer than [`MAX_TOPIC_LEN`] bytes.
    BadTopic,
    /// A loop thread's inbox held [`INBOX_LIMIT`] items already: that thread's subscribers
    /// (or the connection sent to) missed it. The publishers outrun the loops; slow down.
    Overloaded,
    /// The server is stopping or stopped.
    Stopped,
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PublishError::NotData => "only text and binary messages can be published or sent",
            PublishError::BadTopic => "a topic name is 1 to 256 bytes",
            PublishError::Overloaded => {
                "a loop thread's inbox is full (publishers outrun the loops): some subscribers missed this message"
            }
            PublishError::Stopped => "the server is stopping",
        })
    }
}

impl std::error::Error for PublishError {}

/// What one thread hands another.
#[derive(Debug)]
pub(crate) enum Mail {
    Publish {
        topic: Arc<str>,
        message: PreparedMessage,
        except: Option<SocketId>,
    },
    Send {
        to: SocketId,
        message: Message,
    },
}

/// A loop thread's inbox, in `Shared`: filled by any thread, emptied by its own.
#[derive(Debug)]
pub(crate) struct Inbox {
    mail: Mutex<Vec<Mail>>,
    wake: std::io::PipeWriter,
}

impl Inbox {
    pub(crate) fn new(wake: std::io::PipeWriter) -> Self {
        Inbox {
            mail: Mutex::new(Vec::new()),
            wake,
        }
    }

    /// Queues `mail`, waking the thread if its inbox was empty. `false`: the inbox is full.
    pub(crate) fn post(&self, mail: Mail) -> bool {
        let was_empty = {
            let mut queue = self.mail.lock().unwrap_or_else(|p| p.into_inner());
            if queue.len() >= INBOX_LIMIT {
                return false;
            }
            queue.push(mail);
            queue.len() == 1
        };
        if was_empty {
            self.wake();
        }
        true
    }

    /// Wakes the thread (a full pipe already holds a wake-up).
    pub(crate) fn wake(&self) {
        use std::io::Write;
        let _ = (&self.wake).write(&[1]);
    }

    /// Everything queued, taken.
    fn take(&self, into: &mut Vec<Mail>) {
        let mut queue = self.mail.lock().unwrap_or_else(|p| p.into_inner());
        into.append(&mut queue);
    }
}

/// A topic's name, checked.
pub(crate) fn topic_name(topic: &str) -> Result<Arc<str>, PublishError> {
    if topic.is_empty() || topic.len() > MAX_TOPIC_LEN {
        return Err(PublishError::BadTopic);
    }
    Ok(Arc::from(topic))
}

/// Encodes `message` once for every subscriber.
pub(crate) fn prepare(message: Message) -> Result<PreparedMessage, PublishError> {
    PreparedMessage::new(message).ok_or(PublishError::NotData)
}

/// Posts a publication to every thread but `skip` (the caller's own, which queues it directly).
pub(crate) fn post_everywhere(
    inboxes: &[Inbox],
    skip: Option<u32>,
    topic: &Arc<str>,
    message: &PreparedMessage,
    except: Option<SocketId>,
) -> Result<(), PublishError> {
    let mut result = Ok(());
    for (n, inbox) in inboxes.iter().enumerate() {
        if Some(n as u32) == skip {
            continue;
        }
        let mail = Mail::Publish {
            topic: topic.clone(),
            message: message.clone(),
            except,
        };
        if !inbox.post(mail) {
            result = Err(PublishError::Overloaded);
        }
    }
    result
}

/// A loop thread's topics and its queue of what to deliver this turn.
#[derive(Debug, Default)]
pub(crate) struct Topics {
    thread: u32,
    next_serial: u64,
    subscribers: HashMap<Arc<str>, HashSet<u32>>,
    queue: Vec<Mail>,
    /// The buffers of the last turn's delivery, emptied, for the next ([`take_queue`],
    /// [`give_back`]): a turn that delivers publications allocates nothing for it.
    ///
    /// [`take_queue`]: Topics::take_queue
    /// [`give_back`]: Topics::give_back
    spare_queue: Vec<Mail>,
    spare_keys: Vec<u32>,
}

/// Past this many entries a buffer given back is dropped rather than kept: a burst's queue
/// (up to an inbox's 65,536) is not held by an idle thread for good.
const SPARE_KEPT: usize = 1024;

thread_local! {
    static TOPICS: RefCell<Topics> = RefCell::new(Topics::default());
}

/// Calls `f` with this thread's topics.
pub(crate) fn with<R>(f: impl FnOnce(&mut Topics) -> R) -> R {
    TOPICS.with_borrow_mut(f)
}

impl Topics {
    /// Sets this thread's table up for loop thread `thread` (empty).
    pub(crate) fn start(thread: u32) {
        with(|t| {
            *t = Topics {
                thread,
                ..Topics::default()
            }
        });
    }

    /// The id of a connection just accepted into slot `key`.
    pub(crate) fn new_id(&mut self, key: usize) -> SocketId {
        self.next_serial += 1;
        SocketId {
            thread: self.thread,
            key: key as u32,
            serial: self.next_serial,
        }
    }

    pub(crate) fn thread(&self) -> u32 {
        self.thread
    }

    /// `true` if newly subscribed.
    pub(crate) fn subscribe(&mut self, topic: &Arc<str>, key: u32) -> bool {
        self.subscribers.entry(topic.clone()).or_default().insert(key)
    }

    /// `true` if it was subscribed.
    pub(crate) fn unsubscribe(&mut self, topic: &str, key: u32) -> bool {
        let Some(set) = self.subscribers.get_mut(topic) else {
            return false;
        };
        let was = set.remove(&key);
        if set.is_empty() {
            self.subscribers.remove(topic);
        }
        was
    }

    /// A publication or send for this thread's connections, delivered at the end of the turn.
    pub(crate) fn queue(&mut self, mail: Mail) {
        self.queue.push(mail);
    }

    /// Whether deliveries wait (the loop must not sleep before making them).
    pub(crate) fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Takes the thread's inbox into the queue.
    pub(crate) fn collect(&mut self, inbox: &Inbox) {
        inbox.take(&mut self.queue);
    }

    /// What is queued, taken, to deliver (`turn::deliver`).
    /// And a buffer for the subscribers of one publication; both to be given back.
    pub(crate) fn take_queue(&mut self) -> (Vec<Mail>, Vec<u32>) {
        let queue = std::mem::replace(&mut self.queue, std::mem::take(&mut self.spare_queue));
        (queue, std::mem::take(&mut self.spare_keys))
    }

    /// The buffers [`take_queue`](Self::take_queue) gave, kept (emptied) for the next turn.
    pub(crate) fn give_back(&mut self, mut queue: Vec<Mail>, mut keys: Vec<u32>) {
        queue.clear();
        keys.clear();
        if queue.capacity() <= SPARE_KEPT && queue.capacity() > self.spare_queue.capacity() {
            self.spare_queue = queue;
        }
        if keys.capacity() <= SPARE_KEPT && keys.capacity() > self.spare_keys.capacity() {
            self.spare_keys = keys;
        }
    }

    /// The subscribers of `topic` on this thread.
    pub(crate) fn subscribers(&self, topic: &str) -> impl Iterator<Item = u32> + '_ {
        self.subscribers.get(topic).into_iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inbox_takes_up_to_its_limit_and_wakes_once_per_batch() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let inbox = Inbox::new(writer);
        let mail = || Mail::Send {
            to: SocketId {
                thread: 0,
                key: 0,
                serial: 1,
            },
            message: Message::text("x"),
        };
        for _ in 0..INBOX_LIMIT {
            assert!(inbox.post(mail()));
        }
        assert!(!inbox.post(mail()), "beyond the limit");
        // One wake-up byte for the batch (written when the inbox went from empty to not).
        drop(inbox);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut bytes).unwrap();
        assert_eq!(bytes, [1]);
    }

    #[test]
    fn topic_names_are_bounded() {
        assert_eq!(topic_name(""), Err(PublishError::BadTopic));
        assert_eq!(
            topic_name(&"x".repeat(MAX_TOPIC_LEN + 1)),
            Err(PublishError::BadTopic)
        );
        assert!(topic_name(&"x".repeat(MAX_TOPIC_LEN)).is_ok());
        assert_eq!(
            prepare(Message::Ping(Default::default())).err(),
            Some(PublishError::NotData)
        );
    }
}
