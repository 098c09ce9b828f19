//! The driver task: one attempt after another (the request, the connection, the hook), the
//! open connection's messages delivered as events until it ends, the backoff between, and the
//! pause; every wait also listens for commands and for the handle going away.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use sockeye_proto::{CloseCode, CloseFrame, Message};
use tokio::time::Instant;

use super::channels::{Command, Io, Waited};
use super::config::ReconnectConfig;
use super::events::{Attempt, Disconnect, Event, GiveUp};
use super::link::{Link, lock};
use crate::config::Config;
use crate::error::Error;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// The future an [`on_connect`](crate::reconnect::Builder::on_connect) hook returns.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// The [`on_connect`](crate::reconnect::Builder::on_connect) hook, boxed.
pub(super) type Hook = Box<dyn for<'a> FnMut(&'a mut WebSocket<TransportStream>) -> HookFuture<'a> + Send>;
/// The request factory of [`with_factory`](crate::reconnect::ReconnectingClient::with_factory), boxed.
pub(super) type Factory = Box<dyn FnMut(&Attempt) -> Result<Request<()>, Error> + Send>;

/// The driver's next state.
enum Next {
    Connect,
    Wait(Duration),
    Paused,
    End,
}

/// After a closing handshake we started.
#[derive(Clone, Copy)]
enum After {
    Pause,
    End,
}

/// The task behind a [`ReconnectingClient`](crate::reconnect::ReconnectingClient).
pub(super) struct Driver {
    pub(super) factory: Factory,
    pub(super) hook: Option<Hook>,
    pub(super) config: Arc<Config>,
    pub(super) reconnect: ReconnectConfig,
    pub(super) link: Arc<Mutex<Link>>,
    pub(super) io: Io,
    /// Attempts made.
    pub(super) attempts: u64,
    /// Failed attempts in a row.
    pub(super) failures: u32,
    /// Reconnections since the last healthy connection (the backoff's exponent).
    pub(super) retry: u32,
}

impl Driver {
    pub(super) async fn run(mut self) {
        let mut next = Next::Connect;
        loop {
            next = match next {
                Next::Connect => self.connect().await,
                Next::Wait(delay) => self.backoff(delay).await,
                Next::Paused => self.paused().await,
                Next::End => break,
            };
        }
        {
            let mut link = lock(&self.link);
            link.ended = true;
            link.writer = None;
        }
        self.io.deliver_rest().await;
    }

    /// One attempt: the request, the connection, the hook.
    async fn connect(&mut self) -> Next {
        self.attempts += 1;
        let attempt = Attempt {
            number: self.attempts,
            failures: self.failures,
        };
        let result = match (self.factory)(&attempt) {
            Err(e) => Err(e),
            Ok(request) => {
                let config = Arc::clone(&self.config);
                let hook = &mut self.hook;
                let mut connecting = pin!(async move {
                    let (mut ws, response) = crate::client::connect_with(request, &config).await?;
                    if let Some(hook) = hook {
                        hook(&mut ws).await?;
                    }
                    Ok::<_, Error>((ws, response))
                });
                loop {
                    match self.io.wait(connecting.as_mut()).await {
                        Waited::Done(result) => break result,
                        Waited::Command(Command::Resume) => {}
                        Waited::Command(Command::Pause(_)) => {
                            self.io.push(Event::Paused);
                            return Next::Paused;
                        }
                        Waited::Command(Command::Close(_)) | Waited::Stop => return Next::End,
                    }
                }
            }
        };
        match result {
            Ok((ws, response)) => self.connected(ws, response, attempt).await,
            Err(error) => {
                self.failures = self.failures.saturating_add(1);
                self.disconnected(Disconnect::Failed { attempt, error })
            }
        }
    }

    /// A connection is open: deliver its messages until it ends.
    async fn connected(
        &mut self,
        ws: WebSocket<TransportStream>,
        response: Response<()>,
        attempt: Attempt,
    ) -> Next {
        let since = Instant::now();
        self.failures = 0;
        let (writer, mut reader) = ws.split();
        {
            // The queue goes out first, in order: senders wait for this lock, then follow.
            let mut link = lock(&self.link);
            while let Some(message) = link.queue.pop_front() {
                let len = message.as_payload().len();
                if writer.queue_now(message.clone()).is_err() {
                    // Already failing: keep it for the next connection.
                    link.queue.push_front(message);
                    break;
                }
                link.queued_bytes -= len;
            }
            link.writer = Some(writer);
        }
        self.io.push(Event::Connected { response, attempt });

        let mut close_seen: Option<Option<CloseFrame>> = None;
        let mut closing: Option<After> = None;
        let going_away = || Some(CloseFrame::new(CloseCode::GOING_AWAY, ""));
        let error = loop {
            let mut begin_close = None;
            let mut gone = false;
            let mut received = None;
            tokio::select! {
                biased;
                command = self.io.commands.recv(), if closing.is_none() => match command {
                    None => begin_close = Some((going_away(), After::End)),
                    Some(Command::Resume) => {}
                    Some(Command::Pause(frame)) => begin_close = Some((frame, After::Pause)),
                    Some(Command::Close(frame)) => begin_close = Some((frame, After::End)),
                },
                permit = self.io.events.reserve(), if !self.io.outbox.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(event) = self.io.outbox.pop_front() {
                            permit.send(event);
                        }
                    }
                    Err(_) => gone = true,
                },
                () = self.io.events.closed(), if self.io.outbox.is_empty() && closing.is_none() => gone = true,
                item = reader.recv(), if self.io.outbox.is_empty() => match item {
                    Some(Ok(Message::Close(frame))) => close_seen = Some(frame),
                    Some(Ok(message)) => received = Some(message),
                    Some(Err(e)) => break Some(e),
                    None => break None,
                },
            }
            if let Some(message) = received {
                self.io.push(Event::Message(message));
            }
            if gone {
                let _ = self.io.stop::<()>();
                if closing.is_none() {
                    begin_close = Some((going_away(), After::End));
                }
            }
            if let Some((frame, after)) = begin_close {
                closing = Some(after);
                let mut link = lock(&self.link);
                if let After::End = after {
                    link.ended = true;
                }
                if let Some(writer) = link.writer.take() {
                    // Written by the reader's next poll, which then finishes the handshake.
                    let _ = writer.close_now(frame);
                }
            }
        };
        lock(&self.link).writer = None;
        let uptime = since.elapsed();
        if let Some(after) = closing {
            self.io.push(Event::Disconnected(Disconnect::ClosedByUs {
                reply: close_seen.flatten(),
                uptime,
            }));
            return match after {
                After::Pause => {
                    self.io.push(Event::Paused);
                    Next::Paused
                }
                After::End => Next::End,
            };
        }
        if uptime >= self.reconnect.healthy_after {
            self.retry = 0;
        }
        let disconnect = match (close_seen, error) {
            (Some(frame), _) => Disconnect::Closed { frame, uptime },
            (None, Some(error)) => Disconnect::Lost { error, uptime },
            (None, None) => Disconnect::Lost {
                error: sockeye_proto::Error::AbnormalClosure.into(),
                uptime,
            },
        };
        self.disconnected(disconnect)
    }

    /// Reports `disconnect`, then gives up or schedules the next attempt.
    fn disconnected(&mut self, disconnect: Disconnect) -> Next {
        let refused = self.reconnect.is_final(&disconnect);
        self.io.push(Event::Disconnected(disconnect));
        if refused {
            self.io.push(Event::GaveUp(GiveUp::FinalRefusal));
            return Next::End;
        }
        if self
            .reconnect
            .max_attempts
            .is_some_and(|max| self.failures >= max)
        {
            self.io.push(Event::GaveUp(GiveUp::MaxAttempts));
            return Next::End;
        }
        let delay = self.reconnect.backoff.random_delay(self.retry);
        self.retry = self.retry.saturating_add(1);
        self.io.push(Event::Reconnecting {
            attempt: Attempt {
                number: self.attempts + 1,
                failures: self.failures,
            },
            delay,
        });
        Next::Wait(delay)
    }

    /// The backoff: sleeps, unless told otherwise.
    async fn backoff(&mut self, delay: Duration) -> Next {
        let mut sleep = pin!(tokio::time::sleep(delay));
        match self.io.wait(sleep.as_mut()).await {
            Waited::Done(()) | Waited::Command(Command::Resume) => Next::Connect,
            Waited::Command(Command::Pause(_)) => {
                self.io.push(Event::Paused);
                Next::Paused
            }
            Waited::Command(Command::Close(_)) | Waited::Stop => Next::End,
        }
    }

    /// Paused: waits for `resume`.
    async fn paused(&mut self) -> Next {
        loop {
            match self.io.wait(pin!(std::future::pending::<()>())).await {
                Waited::Command(Command::Resume) => return Next::Connect,
                Waited::Command(Command::Pause(_)) => {}
                Waited::Done(()) | Waited::Command(Command::Close(_)) | Waited::Stop => return Next::End,
            }
        }
    }
}
