//! The JetStream stream that holds every topic's history: its configuration, created or
//! brought to the configured limits at connect and after every reconnect, and its creation
//! time, the first part of every epoch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_nats::jetstream::{self, stream};

use crate::config::HistoryConfig;
use crate::error::Error;

/// The JetStream stream holding every topic's history.
pub(super) const STREAM: &str = "SOCKEYE";

pub(super) struct Js {
    pub(super) context: jetstream::Context,
    pub(super) config: stream::Config,
    /// Whether this node's copies (`config.num_replicas`) were set
    /// ([`HistoryConfig::copies`](crate::HistoryConfig::copies)) rather than taken from the
    /// servers its URL lists, for the warning.
    pub(super) copies_set: bool,
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
            .map_err(|e| stream_failed(server, "create", self.config.num_replicas, e))?;
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
        if let Some(lower) = lower_than_stream(&info.config, &self.config, self.copies_set)
            && !self.told.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                "{server}: JetStream stream {STREAM} keeps {}, more than this node's \
                 configuration: the stream is shared by every node and is never lowered by \
                 one. To lower it to this node's, run `nats stream edit {STREAM} {}`; or give \
                 this node the stream's settings (HistoryConfig; ws pubsub_server \
                 --history-len, --history-age, --history-copies)",
                lower.kept.join(", "),
                lower.edit.join(" ")
            );
        }
        let c = &info.config;
        let mut raising = Vec::new();
        if c.max_messages_per_subject != wanted.max_messages_per_subject {
            raising.push(format!(
                "publications per topic from {} to {}",
                count(c.max_messages_per_subject),
                count(wanted.max_messages_per_subject)
            ));
        }
        if c.max_age != wanted.max_age {
            raising.push(format!(
                "max age from {} to {}",
                age(c.max_age),
                age(wanted.max_age)
            ));
        }
        if c.num_replicas != wanted.num_replicas {
            raising.push(format!(
                "copies from {} to {}",
                c.num_replicas, wanted.num_replicas
            ));
        }
        if c.subjects != wanted.subjects || !raising.is_empty() {
            if !raising.is_empty() {
                tracing::info!(
                    "{server}: JetStream stream {STREAM}: raising {} (this node's configuration)",
                    raising.join(", ")
                );
            }
            let copies = wanted.num_replicas;
            let info = self
                .context
                .update_stream(wanted)
                .await
                .map_err(|e| stream_failed(server, "update", copies, e))?;
            self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
            return Ok(info);
        }
        Ok(info)
    }
}

/// The stream's copies for this node: [`HistoryConfig::copies`] if set, checked (1 to
/// [`HistoryConfig::MAX_COPIES`]); else the default for a URL listing `servers` servers, one copy
/// each, up to 3 (NATS's advice: a quorum of 2 survives the loss of any one server).
/// [`Error::InvalidConfig`] for a value out of range.
pub(super) fn copies(history: &HistoryConfig, servers: usize) -> Result<usize, Error> {
    let max = HistoryConfig::MAX_COPIES;
    match history.copies {
        None => Ok(servers.clamp(1, 3)),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(Error::InvalidConfig(format!(
            "HistoryConfig::copies is {n}: the JetStream stream has 1 to {max} copies; give 1 to \
             {max} (3 survive the loss of any one server of a cluster), or leave it unset for one \
             per server the URL lists, up to 3 (ws pubsub_server: --history-copies)"
        ))),
    }
}

/// What creating (`doing`: "create") or updating the stream with `copies` failed with; when the
/// servers refused that many copies, the error says which setting asks for them.
pub(super) fn stream_failed(
    server: &str,
    doing: &str,
    copies: usize,
    e: jetstream::context::CreateStreamError,
) -> Error {
    use jetstream::ErrorCode;
    use jetstream::context::CreateStreamErrorKind as Kind;
    let copies_refused = copies > 1
        && matches!(e.kind(), Kind::JetStream(e) if matches!(
            e.error_code(),
            ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED | ErrorCode::INSUFFICIENT_RESOURCES
        ));
    let what = if copies_refused {
        format!(
            "{server}: {doing} JetStream stream {STREAM} with {copies} copies (as many JetStream \
             servers of one cluster must be up; a server outside a cluster keeps 1 copy: \
             HistoryConfig::copies, ws pubsub_server --history-copies)"
        )
    } else {
        format!("{server}: {doing} JetStream stream {STREAM}")
    };
    Error::backplane(what, e)
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

/// What the stream keeps beyond this node's configuration, for the node to say so.
#[derive(Debug, PartialEq)]
struct Lower {
    /// Each limit the stream keeps higher, with this node's (`3 copies (this node: 1, …)`).
    kept: Vec<String>,
    /// The `nats stream edit` flags that would bring the stream to this node's.
    edit: Vec<String>,
}

/// What the stream keeps beyond this node's configuration (`copies_set`: whether the node's
/// copies were set rather than its URL's default); `None` when it agrees or the node asks for
/// more.
fn lower_than_stream(stream: &stream::Config, node: &stream::Config, copies_set: bool) -> Option<Lower> {
    let wanted = raised(stream, node);
    let mut lower = Lower {
        kept: Vec::new(),
        edit: Vec::new(),
    };
    if wanted.max_messages_per_subject != node.max_messages_per_subject {
        lower.kept.push(format!(
            "{} publications per topic (this node: {})",
            count(wanted.max_messages_per_subject),
            count(node.max_messages_per_subject)
        ));
        lower.edit.push(format!(
            "--max-msgs-per-subject {}",
            node.max_messages_per_subject
        ));
    }
    if wanted.max_age != node.max_age {
        lower.kept.push(format!(
            "a max age of {} (this node: {})",
            age(wanted.max_age),
            age(node.max_age)
        ));
        lower.edit.push(format!("--max-age {}", age(node.max_age)));
    }
    if wanted.num_replicas != node.num_replicas {
        let whose = if copies_set {
            "its HistoryConfig::copies"
        } else {
            "by default, one per server its URL lists, up to 3: set HistoryConfig::copies"
        };
        lower.kept.push(format!(
            "{} copies (this node: {}, {whose})",
            wanted.num_replicas, node.num_replicas
        ));
        lower.edit.push(format!("--replicas {}", node.num_replicas));
    }
    (!lower.kept.is_empty()).then_some(lower)
}

/// A per-subject limit as said: unlimited at 0 or less.
fn count(n: i64) -> String {
    if n <= 0 { "unlimited".into() } else { n.to_string() }
}

/// A max age as `nats stream edit --max-age` takes it (`300s`, `1500ms`); `unlimited` at zero.
fn age(d: std::time::Duration) -> String {
    if d.is_zero() {
        "unlimited".into()
    } else if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis().max(1))
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

/// What a check needs of the message stored at one sequence: the topic's last delivery still
/// kept (the limits drop a topic's oldest first), the sequence given to another publication (the
/// stream went back), a history's first publication still there.
pub(super) struct Stored {
    /// The subject it was published on (the topic's: [`super::wire::subject`]).
    pub(super) subject: String,
    /// When the stream stored it (Unix nanoseconds).
    pub(super) time: i128,
    /// The server life its header names ([`super::life`]).
    pub(super) life: Option<String>,
}

/// The message the stream holds at `seq`; `Ok(None)` when it holds none there (dropped, deleted
/// or past the end); an error when JetStream did not answer.
pub(super) async fn stored_at(
    stream: &stream::Stream,
    seq: u64,
) -> Result<Option<Stored>, stream::RawMessageError> {
    match stream.get_raw_message(seq).await {
        Ok(m) => Ok(Some(Stored {
            life: super::life::of_message(Some(&m.headers)).map(str::to_owned),
            subject: m.subject.to_string(),
            time: m.time.unix_timestamp_nanos(),
        })),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a nats-server of `version` ("2.9.10") is one whose JetStream consumers were seen to
/// skip publications still in the stream: 2.9 and older. Issue 39's checker, NATS JetStream,
/// seed 1, on 2.9.10: two nodes' consumers of one topic both went from sequence 3063 to 3089
/// while 3064 to 3088 were stored, acknowledged and far inside the topic's limit; no client-side
/// check can see such a skip without a request per delivery (another topic's publications skip
/// sequences all the time). None in 2.10.27 (the NATS project fixed several consumer skips
/// in 2.10). An unparsable version is not judged.
pub(super) fn skips_publications(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) < (2, 10),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn servers_before_2_10_are_known_to_skip() {
        for old in ["2.9.10", "v2.9.25", "2.2.0", "1.4.1"] {
            assert!(skips_publications(old), "{old}");
        }
        for new in ["2.10.27", "2.11.0-beta.1", "2.15.1", "3.0.0", "", "dev", "2"] {
            assert!(!skips_publications(new), "{new}");
        }
    }

    fn config(per_topic: i64, age: u64, copies: usize) -> stream::Config {
        stream::Config {
            name: STREAM.into(),
            max_messages_per_subject: per_topic,
            max_age: Duration::from_secs(age),
            num_replicas: copies,
            ..Default::default()
        }
    }

    #[test]
    fn copies_are_one_to_five_or_the_urls_default() {
        let default = HistoryConfig::default();
        assert_eq!(default.copies, None);
        assert_eq!(
            [1, 2, 3, 4].map(|servers| copies(&default, servers).ok()),
            [Some(1), Some(2), Some(3), Some(3)]
        );
        for n in 1..=HistoryConfig::MAX_COPIES {
            assert_eq!(copies(&default.copies(n), 1).ok(), Some(n));
        }
        for n in [0, 6, usize::MAX] {
            let e = copies(&default.copies(n), 3).unwrap_err();
            assert!(matches!(e, Error::InvalidConfig(_)) && e.is_caller_fault(), "{e}");
            assert!(e.to_string().contains("give 1 to 5"), "{e}");
        }
    }

    #[test]
    fn a_node_raises_never_lowers_and_says_what_lowers_the_stream() {
        let stream = config(1000, 300, 3);
        // More copies raise them; nothing to say.
        assert_eq!(raised(&stream, &config(1000, 300, 5)).num_replicas, 5);
        assert_eq!(lower_than_stream(&stream, &config(1000, 300, 5), true), None);
        // Fewer keep the stream's, and say both and the command.
        let node = config(10, 60, 1);
        let wanted = raised(&stream, &node);
        assert_eq!(
            (
                wanted.max_messages_per_subject,
                wanted.max_age,
                wanted.num_replicas
            ),
            (1000, Duration::from_secs(300), 3)
        );
        let lower = lower_than_stream(&stream, &node, true).unwrap();
        assert_eq!(
            lower.kept,
            [
                "1000 publications per topic (this node: 10)",
                "a max age of 300s (this node: 60s)",
                "3 copies (this node: 1, its HistoryConfig::copies)",
            ]
        );
        assert_eq!(
            lower.edit,
            ["--max-msgs-per-subject 10", "--max-age 60s", "--replicas 1"]
        );
        // Copies from the URL's default say so.
        let lower = lower_than_stream(&stream, &config(1000, 300, 1), false).unwrap();
        assert_eq!(
            lower.kept,
            [
                "3 copies (this node: 1, by default, one per server its URL lists, up to 3: set HistoryConfig::copies)"
            ]
        );
        // Unlimited is the largest.
        let unlimited = config(-1, 0, 3);
        assert_eq!(lower_than_stream(&stream, &unlimited, true), None);
        let lower = lower_than_stream(&unlimited, &config(10, 60, 3), true).unwrap();
        assert_eq!(
            lower.kept,
            [
                "unlimited publications per topic (this node: 10)",
                "a max age of unlimited (this node: 60s)",
            ]
        );
        assert_eq!(age(Duration::from_millis(1500)), "1500ms");
    }
}
