//! The JetStream stream that holds every topic's history: its configuration, created or
//! brought to the configured limits at connect and after every reconnect, and its creation
//! time, the first part of every epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_nats::jetstream::{self, stream};

use crate::error::Error;

/// The JetStream stream holding every topic's history.
pub(super) const STREAM: &str = "SOCKEYE";

pub(super) struct Js {
    pub(super) context: jetstream::Context,
    pub(super) config: stream::Config,
    /// The stream's creation time as last seen (at connect and after each reconnect), for the
    /// positions a publish returns.
    pub(super) epoch: std::sync::Mutex<Arc<str>>,
    /// The stream's copies as last seen: more than one, and no life is written (a cluster).
    pub(super) replicas: AtomicUsize,
    /// Whether this node said once that the stream keeps more than its configuration.
    pub(super) told: AtomicBool,
}

impl Js {
    /// Creates the stream, or raises its limits to this node's where they are lower (never
    /// lowers them: see [`raised`]); its info.
    pub(super) async fn ensure_stream(&self, server: &str) -> Result<stream::Info, Error> {
        let mut stream = self
            .context
            .get_or_create_stream(self.config.clone())
            .await
            .map_err(|e| Error::backplane(format!("{server}: create JetStream stream {STREAM}"), e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| Error::backplane(format!("{server}: JetStream stream {STREAM} info"), e))?
            .clone();
        *self
            .epoch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = epoch_of(&info).into();
        self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
        let wanted = raised(&info.config, &self.config);
        if let Some(lower) = lower_than_stream(&info.config, &self.config)
            && !self.told.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "{server}: JetStream stream {STREAM} keeps {lower}, more than this node's \
                 configuration: the stream is shared by every node and is never lowered by \
                 one (lower it by hand, e.g. `nats stream edit {STREAM}`, or give this node \
                 the same history and server list)"
            );
        }
        let c = &info.config;
        if c.subjects != wanted.subjects
            || c.max_messages_per_subject != wanted.max_messages_per_subject
            || c.max_age != wanted.max_age
            || c.num_replicas != wanted.num_replicas
        {
            let info =
                self.context.update_stream(wanted).await.map_err(|e| {
                    Error::backplane(format!("{server}: update JetStream stream {STREAM}"), e)
                })?;
            self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
            return Ok(info);
        }
        Ok(info)
    }
}

/// What the stream should be: this node's subjects, each limit the larger of the stream's and
/// this node's (unlimited, 0 or less, being the largest). A node raises the shared stream's
/// window or copies, never lowers them: nodes configured differently (or listing a cluster's
/// servers differently) flipped it between their settings, cutting the others' history and,
/// from 3 copies to 1, changing what a position means (no server life is written in a cluster).
fn raised(stream: &stream::Config, node: &stream::Config) -> stream::Config {
    let unlimited_or_max = |a: i64, b: i64| if a <= 0 || b <= 0 { -1 } else { a.max(b) };
    let age = if stream.max_age.is_zero() || node.max_age.is_zero() {
        std::time::Duration::ZERO
    } else {
        stream.max_age.max(node.max_age)
    };
    stream::Config {
        max_messages_per_subject: unlimited_or_max(
            stream.max_messages_per_subject,
            node.max_messages_per_subject,
        ),
        max_age: age,
        num_replicas: stream.num_replicas.max(node.num_replicas),
        ..node.clone()
    }
}

/// What the stream keeps beyond this node's configuration, for the node to say so; `None` when
/// it agrees or the node asks for more.
fn lower_than_stream(stream: &stream::Config, node: &stream::Config) -> Option<String> {
    let wanted = raised(stream, node);
    let mut more = Vec::new();
    if wanted.max_messages_per_subject != node.max_messages_per_subject {
        more.push(format!(
            "{} publications per topic (this node: {})",
            wanted.max_messages_per_subject, node.max_messages_per_subject
        ));
    }
    if wanted.max_age != node.max_age {
        more.push(format!(
            "a max age of {:?} (this node: {:?})",
            wanted.max_age, node.max_age
        ));
    }
    if wanted.num_replicas != node.num_replicas {
        more.push(format!(
            "{} copies (this node: {})",
            wanted.num_replicas, node.num_replicas
        ));
    }
    (!more.is_empty()).then(|| more.join(", "))
}

/// A stream's creation time, in nanoseconds, hex: the epoch of its publications without a life,
/// the first part of the others'.
pub(super) fn epoch_of(info: &stream::Info) -> String {
    format!("{:x}", info.created.unix_timestamp_nanos())
}

/// Whether creating the stream failed for want of JetStream on the server.
pub(super) fn jetstream_unavailable(e: &jetstream::context::CreateStreamError) -> bool {
    use jetstream::ErrorCode;
    use jetstream::context::CreateStreamErrorKind as Kind;
    match e.kind() {
        Kind::JetStreamUnavailable => true,
        Kind::JetStream(e) => matches!(
            e.error_code(),
            ErrorCode::JETSTREAM_NOT_ENABLED | ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
        ),
        _ => false,
    }
}
