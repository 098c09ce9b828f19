//! The driver's channels: [`Command`]s in from the handles, [`Event`]s out to the caller (a
//! bounded channel behind a small outbox), and [`Io::wait`], which waits for the driver's work
//! while it keeps both moving.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use sockeye_proto::CloseFrame;
use tokio::sync::mpsc;

use super::events::Event;

/// What a handle asks of the driver.
pub(super) enum Command {
    Pause(Option<CloseFrame>),
    Resume,
    Close(Option<CloseFrame>),
}

/// The driver's channels.
pub(super) struct Io {
    pub(super) commands: mpsc::UnboundedReceiver<Command>,
    pub(super) events: mpsc::Sender<Event>,
    /// Events made and not yet in the channel: a few transitions, or one message (the
    /// connection is read only when this is empty, so the caller's pace bounds it).
    pub(super) outbox: VecDeque<Event>,
    /// The caller dropped the client: events go nowhere.
    pub(super) gone: bool,
}

/// What interrupted a wait.
pub(super) enum Waited<T> {
    Done(T),
    Command(Command),
    /// The client was dropped.
    Stop,
}

impl Io {
    pub(super) fn push(&mut self, event: Event) {
        if !self.gone {
            self.outbox.push_back(event);
        }
    }

    /// Waits for `work` while delivering events and listening for commands.
    pub(super) async fn wait<T>(&mut self, mut work: Pin<&mut impl Future<Output = T>>) -> Waited<T> {
        loop {
            let gone = tokio::select! {
                biased;
                command = self.commands.recv() => {
                    return command.map_or(Waited::Stop, Waited::Command);
                }
                permit = self.events.reserve(), if !self.outbox.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.outbox.pop_front() {
                            permit.send(event);
                        }
                        false
                    }
                    Err(_) => true,
                },
                () = self.events.closed(), if self.outbox.is_empty() => true,
                done = work.as_mut() => return Waited::Done(done),
            };
            if gone {
                return self.stop();
            }
        }
    }

    pub(super) fn stop<T>(&mut self) -> Waited<T> {
        self.gone = true;
        self.outbox.clear();
        Waited::Stop
    }

    /// Hands over the events left, unless the caller goes away.
    pub(super) async fn deliver_rest(&mut self) {
        while !self.outbox.is_empty() && !self.gone {
            tokio::select! {
                biased;
                command = self.commands.recv() => if command.is_none() {
                    return;
                },
                permit = self.events.reserve() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.outbox.pop_front() {
                            permit.send(event);
                        }
                    }
                    Err(_) => return,
                },
            }
        }
    }
}
