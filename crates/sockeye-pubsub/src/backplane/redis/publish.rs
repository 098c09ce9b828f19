//! Publishing over the command connection: one publication with the publish script, a batch in
//! one pipeline (one round trip), and what a failure says was published.

use redis::{RedisError, Value};

use super::connection::{Commands, Shared};
use super::wire::{PUBLISH_SCRIPT, position_of, script_input};
use crate::backplane::api::partly_published;
use crate::backplane::position::{Position, Publication};
use crate::error::Error;

impl Shared {
    pub(super) async fn publish(&self, p: Publication) -> Result<Option<Position>, Error> {
        let topic = p.topic.clone();
        let Commands { mut conn, life } = self.commands().await?;
        let result: Result<Value, RedisError> = self.invocation(&p, &life).invoke_async(&mut conn).await;
        match result {
            Ok(v) => Ok(position_of(&v)),
            Err(e) => {
                // Not retried: the script may have run before the connection dropped, and a
                // retry would publish twice.
                self.reset_commands().await;
                Err(self.error(&format!("publish to {topic}"), e))
            }
        }
    }

    /// The publish script's keys and arguments for `p` (see [`PUBLISH_SCRIPT`]).
    fn script_input(&self, p: &Publication, life: &str) -> ([String; 2], Vec<Vec<u8>>) {
        script_input(&self.history, &p.topic, std::slice::from_ref(p), life, "publish")
    }

    /// The publish script's invocation for `p` (`EVALSHA`, then `EVAL` if Redis does not have the
    /// script).
    fn invocation(&self, p: &Publication, life: &str) -> redis::ScriptInvocation<'_> {
        let ([meta, stream], args) = self.script_input(p, life);
        let mut invocation = self.publish.key(meta);
        invocation.key(stream).arg(args);
        invocation
    }

    /// Publishes a batch in one round trip: one pipeline (not a transaction) of `SCRIPT LOAD`
    /// then one `EVALSHA` of the publish script per publication. Each script runs atomically, in
    /// order (one connection); other clients' commands may run between them.
    ///
    /// `SCRIPT LOAD` first, in the same pipeline, so that no `EVALSHA` meets an empty script
    /// cache (a restarted Redis): otherwise some of the batch could fail with NOSCRIPT while
    /// others ran (another node loading the script meanwhile), and resending would duplicate.
    pub(super) async fn publish_many(&self, batch: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let n = batch.len();
        match n {
            0 => return Ok(Vec::new()),
            1 => {
                // One publication: the script's own NOSCRIPT fallback, nothing to load.
                let p = batch.into_iter().next().ok_or(Error::Closed)?;
                let Commands { mut conn, life } = self.commands().await?;
                let topic = p.topic.clone();
                let result: Result<Value, RedisError> =
                    self.invocation(&p, &life).invoke_async(&mut conn).await;
                return match result {
                    Ok(v) => Ok(position_of(&v).into_iter().collect()),
                    Err(e) => {
                        self.reset_commands().await;
                        Err(partly_published(
                            0,
                            1,
                            self.error(&format!("publish to {topic}"), e),
                        ))
                    }
                };
            }
            _ => {}
        }
        let what = if batch.iter().all(|p| p.topic == batch[0].topic) {
            format!("publish {n} publications to {}", batch[0].topic)
        } else {
            format!("publish {n} publications")
        };
        // Nothing sent if there is no connection: the batch can be retried whole.
        let Commands { mut conn, life } = self.commands().await?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("SCRIPT").arg("LOAD").arg(PUBLISH_SCRIPT);
        for p in &batch {
            let (keys, args) = self.script_input(p, &life);
            pipe.cmd("EVALSHA")
                .arg(self.publish.get_hash())
                .arg(keys.len())
                .arg(&keys[..])
                .arg(args);
        }
        drop(batch);
        let replies: Vec<Result<Value, RedisError>> = match pipe.query_async(&mut conn).await {
            Ok(r) => r,
            Err(e) => {
                // Sent, no answer (the connection dropped, or no reply within the timeout): any
                // prefix of the batch may have been published.
                self.reset_commands().await;
                return Err(partly_published(0, n, self.error(&what, e)));
            }
        };
        // SCRIPT LOAD's reply aside: what counts is which scripts ran.
        let results: Vec<Result<Value, RedisError>> = replies.into_iter().skip(1).collect();
        let published = results.iter().take_while(|r| r.is_ok()).count();
        if published == n && results.len() == n {
            return Ok(results.iter().flatten().filter_map(position_of).collect());
        }
        // Each failed script did not publish (one body each, its PUBLISH the last call); a later
        // one may have.
        let sent = results.iter().rposition(Result::is_ok).map_or(0, |i| i + 1);
        let first_error = results
            .into_iter()
            .find_map(Result::err)
            .map_or_else(|| self.error(&what, "missing reply"), |e| self.error(&what, e));
        Err(partly_published(published, sent, first_error))
    }
}
