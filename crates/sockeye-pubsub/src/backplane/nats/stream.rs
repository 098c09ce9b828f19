//! The JetStream stream that holds every topic's history: its configuration, created or
//! brought to the configured limits at connect and after every reconnect, and its creation
//! time, the first part of every epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
}

impl Js {
    /// Creates the stream, or updates its limits if they differ; its info.
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
        let c = &info.config;
        if c.subjects != self.config.subjects
            || c.max_messages_per_subject != self.config.max_messages_per_subject
            || c.max_age != self.config.max_age
            || c.num_replicas != self.config.num_replicas
        {
            let info = self
                .context
                .update_stream(self.config.clone())
                .await
                .map_err(|e| Error::backplane(format!("{server}: update JetStream stream {STREAM}"), e))?;
            self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
            return Ok(info);
        }
        Ok(info)
    }
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
