//! One WebSocket's bounds on publishing: how many publications a second (a token bucket that
//! holds a second's worth) and on how many distinct topics over its life (each one a topic the
//! backplane may create, and keep: a Redis stream lives a day).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use crate::json_protocol::ErrorCode;
use crate::topic::Topic;

/// A connection's publishing so far, against its bounds.
pub(crate) struct PublishLimit {
    rate: Option<u32>,
    topics: Option<usize>,
    state: Mutex<State>,
}

struct State {
    /// Publications the bucket holds now (at most `rate`).
    tokens: f64,
    refilled: Instant,
    /// The topics published on (only counted with a bound on them).
    topics: HashSet<Topic>,
}

impl PublishLimit {
    /// At most `rate` publications a second and `topics` distinct topics (`None`: no bound).
    pub(crate) fn new(rate: Option<u32>, topics: Option<usize>) -> PublishLimit {
        PublishLimit {
            rate,
            topics,
            state: Mutex::new(State {
                tokens: f64::from(rate.unwrap_or(0)),
                refilled: Instant::now(),
                topics: HashSet::new(),
            }),
        }
    }

    /// Whether one more publication on `topic` is within the bounds; if not, the error code
    /// and message of its refusal (nothing is published).
    pub(crate) fn check(&self, topic: &Topic) -> Result<(), (ErrorCode, String)> {
        if self.rate.is_none() && self.topics.is_none() {
            return Ok(());
        }
        let mut state = crate::lock::lock(&self.state);
        let new_topic = self.topics.is_some() && !state.topics.contains(topic);
        if let Some(max) = self.topics
            && new_topic
            && state.topics.len() >= max
        {
            return Err((
                ErrorCode::NotAllowed,
                format!(
                    "this connection may publish on {max} topics, and has (WebConfig::max_publish_topics; ws pubsub_server --max-publish-topics): publish on those, or reconnect"
                ),
            ));
        }
        if let Some(rate) = self.rate {
            let now = Instant::now();
            let rate = f64::from(rate);
            let elapsed = now.duration_since(state.refilled).as_secs_f64();
            state.tokens = (state.tokens + elapsed * rate).min(rate);
            state.refilled = now;
            if state.tokens < 1.0 {
                return Err((
                    ErrorCode::RateLimited,
                    format!(
                        "this connection may publish {rate} times a second (WebConfig::max_publish_rate; ws pubsub_server --max-publish-rate): nothing was published; retry later"
                    ),
                ));
            }
            state.tokens -= 1.0;
        }
        if new_topic {
            state.topics.insert(topic.clone());
        }
        Ok(())
    }
}
