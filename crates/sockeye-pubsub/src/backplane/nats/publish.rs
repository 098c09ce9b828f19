//! Publishing on NATS: one server check for the batch, then every publication (JetStream: with
//! the server's life in a header, acknowledgements awaited in order; core: the life too, one
//! flush), within
//! the request timeout, and what a failure says was published.

use async_nats::connection::State;

use super::connection::{REQUEST_TIMEOUT, Shared};
use super::life;
use super::wire::{encode, subject};
use crate::backplane::api::partly_published;
use crate::backplane::position::{Position, Publication};
use crate::error::Error;

impl Shared {
    /// See [`Backplane::publish_many`] for [`Nats`].
    pub(super) async fn publish_many(&self, batch: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let n = batch.len();
        let Some(first) = batch.first() else {
            return Ok(Vec::new());
        };
        let what = if n == 1 {
            format!("publish on {}", first.topic)
        } else if batch.iter().all(|p| p.topic == first.topic) {
            format!("publish {n} publications on {}", first.topic)
        } else {
            format!("publish {n} publications")
        };
        if self.client.connection_state() != State::Connected {
            return Err(Error::Backplane {
                what: format!("{}: {what}: not connected (reconnecting)", self.server),
                source: None,
            });
        }
        let max = self.client.server_info().max_payload;
        let mut bodies = Vec::with_capacity(n);
        for p in &batch {
            let body = encode(p);
            if max > 0 && body.len() > max {
                return Err(Error::Backplane {
                    what: format!(
                        "{}: publish on {}: {} bytes with the header, over the server's max_payload of {max}",
                        self.server,
                        p.topic,
                        body.len()
                    ),
                    source: None,
                });
            }
            bodies.push((subject(&p.topic), body));
        }
        drop(batch);
        // How far the batch got: handed to the client (`sent`), acknowledged (`published`).
        let mut sent = 0;
        let mut published = 0;
        let run = async {
            // A round trip through the server first, once for the batch: a connection that died
            // before the client noticed would otherwise take the batch into its buffer and send
            // it after the reconnect, when this call has long failed.
            self.round_trip(&what).await?;
            // The client's connections so far: one made while the batch goes out (a reconnect)
            // is checked for after it, differently with JetStream and without.
            let connects_before = self.connects();
            match &self.js {
                Some(js) => {
                    // The life of the server, read last before sending (after the check above):
                    // the batch names it. See "The window" in the NATS backplane's documentation.
                    let life = self.life(js);
                    let headers = life.as_deref().map(|l| {
                        let mut h = async_nats::HeaderMap::new();
                        h.insert(life::HEADER, l);
                        h
                    });
                    let mut acks = Vec::with_capacity(n);
                    for (subject, body) in bodies {
                        let ack = match &headers {
                            Some(h) => js.context.publish_with_headers(subject, h.clone(), body).await,
                            None => js.context.publish(subject, body).await,
                        }
                        .map_err(|e| self.failed(&what, e))?;
                        sent += 1;
                        acks.push(ack);
                    }
                    // In order: the first one not acknowledged ends what is known published.
                    let mut positions = Vec::with_capacity(n);
                    for ack in acks {
                        let ack = ack.await.map_err(|e| self.failed(&what, e))?;
                        published += 1;
                        positions.push(ack.sequence);
                    }
                    if self.life(js) != life {
                        // The client reconnected meanwhile to another life of the server (a
                        // restart: a new `server_id`), and may have sent the batch there, with
                        // the previous life in its header. Its positions are still those of the
                        // life in its header (what every reader sees), which readers no longer
                        // take as current: a live subscriber gets a gap there, a history read
                        // that meets them is `Lost`, a resume from them is a gap: nothing is
                        // silent.
                        tracing::warn!(
                            "{}: {what}: the server restarted while publishing; the publications \
                             may name its previous life (gaps for their readers, nothing silent)",
                            self.server
                        );
                    } else if self.connects() != connects_before {
                        // Reconnected to the same life (same `server_id`: the same process):
                        // the header names the server that stored the batch.
                        tracing::debug!(
                            "{}: {what}: reconnected to the same server while publishing",
                            self.server
                        );
                    }
                    let created = js
                        .epoch
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    let epoch = life::epoch(&created, life.as_deref());
                    Ok(positions
                        .into_iter()
                        .map(|offset| Position {
                            epoch: epoch.clone(),
                            offset,
                        })
                        .collect())
                }
                None => {
                    // A node without history still names the server's life, as a node with
                    // JetStream does: where nodes with history keep the topic's history, the
                    // stream stores this publication too (its subjects are every topic's), and
                    // without the header it would be of another epoch to them (a gap at each
                    // one, on a single server). The topic's history is the topic's, whichever
                    // node published.
                    let headers = core_life(&self.client.server_info()).map(|l| {
                        let mut h = async_nats::HeaderMap::new();
                        h.insert(life::HEADER, l.as_str());
                        h
                    });
                    for (subject, body) in bodies {
                        match &headers {
                            Some(h) => self.client.publish_with_headers(subject, h.clone(), body).await,
                            None => self.client.publish(subject, body).await,
                        }
                        .map_err(|e| self.failed(&what, e))?;
                        sent += 1;
                    }
                    // Published once the server has taken the batch: a round trip after it (a
                    // flush only wrote it to the socket, where a connection lost then would
                    // lose it after the caller was told it was published). On the connection
                    // the batch went out on: one lost and made again meanwhile dropped what it
                    // held (the client's buffer, the socket's), and a round trip on the new one
                    // says nothing of that (issue 39's checker, web-nats seed 988831: 128 of a
                    // burst acknowledged, delivered to no one).
                    self.round_trip(&what).await?;
                    if self.connects() != connects_before {
                        return Err(Error::Backplane {
                            what: format!(
                                "{}: {what}: the connection was lost and made again while the \
                                 batch was sent; the server may have missed any of it",
                                self.server
                            ),
                            source: None,
                        });
                    }
                    published = sent;
                    // Core NATS gives no positions.
                    Ok(Vec::new())
                }
            }
        };
        let result = match tokio::time::timeout(REQUEST_TIMEOUT, run).await {
            Ok(r) => r,
            Err(_) => Err(Error::Backplane {
                what: format!("{}: {what}: no answer within {REQUEST_TIMEOUT:?}", self.server),
                source: None,
            }),
        };
        result.map_err(|e| partly_published(published, sent, e))
    }
}

/// The life a core publication names: the server's, on a single server (as
/// [`Shared::life`] for JetStream); `None` in a cluster or while the server is not known.
fn core_life(info: &async_nats::ServerInfo) -> Option<String> {
    let clustered = info.cluster.as_deref().is_some_and(|c| !c.is_empty());
    (!clustered && !info.server_id.is_empty()).then(|| life::of_server(&info.server_id))
}
