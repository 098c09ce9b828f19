//! Who may subscribe to and publish on which topics: rules written once for the node, with
//! placeholders filled in from each connection's identity (a token's claims, say).
//!
//! A rule is matched against a topic segment by segment (the parts between `/`):
//! - a segment of text matches that segment exactly;
//! - `{name}` (a whole segment) matches the connection's value for `name` (`user/{sub}` with
//!   `sub = "42"` grants `user/42`). A connection without that value, or whose value is empty
//!   or contains a `/` (it would span segments), is granted nothing by the rule. The value is
//!   taken literally: a `*` or `{` in it is not a pattern;
//! - `*` matches exactly one segment, which is not empty (`rooms/*` grants `rooms/lobby`, not
//!   `rooms/a/b` nor `rooms/`);
//! - `**`, as the last segment only, matches one or more segments (`rooms/**` grants
//!   `rooms/lobby` and `rooms/a/b`, not `rooms`; `**` alone grants every topic).
//!
//! A segment may not mix text with a pattern (`user-{sub}`, `a*`): such a rule is refused, so
//! that no value can reach past its segment (`user/{sub}*` granting `user/42` to `sub = "4"`).
//!
//! ```
//! use sockeye_pubsub::access::AccessRules;
//! use sockeye_pubsub::Topic;
//!
//! let rules = AccessRules::new()
//!     .subscribe("user/{sub}")?
//!     .subscribe("global")?
//!     .publish("rooms/*")?;
//! let alice = rules.grant(|claim| (claim == "sub").then(|| "alice".to_owned()));
//! assert!(alice.may_subscribe(&Topic::new("user/alice")?));
//! assert!(!alice.may_subscribe(&Topic::new("user/bob")?));
//! assert!(alice.may_publish(&Topic::new("rooms/lobby")?));
//! assert!(!alice.may_publish(&Topic::new("rooms/lobby/x")?));
//! assert!(!alice.may_publish(&Topic::new("global")?));
//! # Ok::<(), sockeye_pubsub::Error>(())
//! ```

use crate::error::Error;
use crate::topic::Topic;

/// The node's rules, before they are granted to a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessRules {
    subscribe: Vec<Rule>,
    publish: Vec<Rule>,
}

/// What one connection may do: its rules with its own values filled in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    subscribe: Vec<Grant>,
    publish: Vec<Grant>,
}

/// A rule's segments, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Text(String),
    Value(String),
    /// `*`: one non-empty segment.
    One,
    /// `**` (last): one or more segments.
    Rest,
}

/// A rule with the connection's values filled in: text, `*` and `**` only.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Grant {
    segments: Vec<Segment>,
}

impl AccessRules {
    /// No rules: grants nothing.
    pub fn new() -> AccessRules {
        AccessRules::default()
    }

    /// Every connection may subscribe to and publish on every topic (a node without auth).
    pub fn allow_all() -> AccessRules {
        let all = Rule {
            segments: vec![Segment::Rest],
        };
        AccessRules {
            subscribe: vec![all.clone()],
            publish: vec![all],
        }
    }

    /// Adds a rule for subscribing. Errors on a malformed rule (an empty rule, a segment that
    /// mixes text with `{`, `}` or `*`, an invalid placeholder name, `**` before the end).
    pub fn subscribe(mut self, rule: &str) -> Result<AccessRules, Error> {
        self.subscribe.push(Rule::parse(rule)?);
        Ok(self)
    }

    /// Adds a rule for publishing; errors as [`subscribe`](Self::subscribe).
    pub fn publish(mut self, rule: &str) -> Result<AccessRules, Error> {
        self.publish.push(Rule::parse(rule)?);
        Ok(self)
    }

    /// The access of a connection whose value for a placeholder `name` is `value(name)`.
    pub fn grant(&self, value: impl Fn(&str) -> Option<String>) -> Access {
        let grant = |rules: &[Rule]| rules.iter().filter_map(|r| r.fill(&value)).collect();
        Access {
            subscribe: grant(&self.subscribe),
            publish: grant(&self.publish),
        }
    }
}

impl Access {
    /// Every topic, both ways.
    pub fn everything() -> Access {
        AccessRules::allow_all().grant(|_| None)
    }

    /// Whether the connection may subscribe to `topic`.
    pub fn may_subscribe(&self, topic: &Topic) -> bool {
        self.subscribe.iter().any(|g| g.matches(topic.as_str()))
    }

    /// Whether the connection may publish on `topic`.
    pub fn may_publish(&self, topic: &Topic) -> bool {
        self.publish.iter().any(|g| g.matches(topic.as_str()))
    }
}

impl Rule {
    fn parse(rule: &str) -> Result<Rule, Error> {
        let bad = |why: &str| Error::InvalidTopic(format!("access rule {rule:?}: {why}"));
        if rule.is_empty() {
            return Err(bad("an empty rule grants nothing; `**` grants every topic"));
        }
        let parts: Vec<&str> = rule.split('/').collect();
        let last = parts.len() - 1;
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.into_iter().enumerate() {
            let segment = match part {
                "*" => Segment::One,
                "**" if i == last => Segment::Rest,
                "**" => {
                    return Err(bad(
                        "`**` (the rest of the topic) is allowed only as the last segment",
                    ));
                }
                _ if part.starts_with('{') && part.ends_with('}') && part.len() > 2 => {
                    let name = &part[1..part.len() - 1];
                    if !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        return Err(bad(
                            "a placeholder is a whole segment `{name}`, the name made of letters, digits, `_` and `-`",
                        ));
                    }
                    Segment::Value(name.to_owned())
                }
                _ if part.contains(['{', '}', '*']) => {
                    return Err(bad(
                        "`*`, `**` and `{name}` are whole segments (between `/`): write `user/{sub}`, `rooms/*`, `rooms/**`",
                    ));
                }
                _ => Segment::Text(part.to_owned()),
            };
            segments.push(segment);
        }
        Ok(Rule { segments })
    }

    fn fill(&self, value: &impl Fn(&str) -> Option<String>) -> Option<Grant> {
        let mut segments = Vec::with_capacity(self.segments.len());
        for segment in &self.segments {
            segments.push(match segment {
                // An empty value would widen `user/{sub}/**`-like rules to everyone's topics,
                // one with a `/` would reach into other segments.
                Segment::Value(name) => {
                    Segment::Text(value(name).filter(|v| !v.is_empty() && !v.contains('/'))?)
                }
                other => other.clone(),
            });
        }
        Some(Grant { segments })
    }
}

impl Grant {
    fn matches(&self, topic: &str) -> bool {
        let mut parts = topic.split('/');
        for segment in &self.segments {
            match segment {
                // The rest: at least one more segment (it may hold `/`, not be empty as a whole).
                Segment::Rest => {
                    return match parts.next() {
                        None => false,
                        Some("") => parts.next().is_some(),
                        Some(_) => true,
                    };
                }
                Segment::One => match parts.next() {
                    Some(part) if !part.is_empty() => {}
                    _ => return false,
                },
                Segment::Text(text) => match parts.next() {
                    Some(part) if part == text => {}
                    _ => return false,
                },
                // Filled in by `Rule::fill`; a grant holds none.
                Segment::Value(_) => return false,
            }
        }
        parts.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str) -> Topic {
        Topic::new(name).unwrap()
    }

    #[test]
    fn placeholders_are_filled_literally_and_missing_values_grant_nothing() {
        let rules = AccessRules::new().subscribe("user/{sub}/{tenant}").unwrap();
        let values = |sub: &'static str| {
            move |n: &str| match n {
                "sub" => Some(sub.to_owned()),
                "tenant" => Some("t1".to_owned()),
                _ => None,
            }
        };
        assert!(rules.grant(values("42")).may_subscribe(&topic("user/42/t1")));
        // A value with pattern characters is text, not a pattern.
        let star = rules.grant(values("*"));
        assert!(!star.may_subscribe(&topic("user/42/t1")));
        assert!(star.may_subscribe(&topic("user/*/t1")));
        let stars = rules.grant(values("**"));
        assert!(!stars.may_subscribe(&topic("user/42/t1")));
        assert!(!rules.grant(|_| None).may_subscribe(&topic("user//")));
        assert!(!rules.grant(values("")).may_subscribe(&topic("user//t1")));
    }

    /// The issue's abuse: a prefix match let `sub = "4"` reach `user/42`, and a value with `/`
    /// reach another user's topics.
    #[test]
    fn a_value_never_reaches_past_its_segment() {
        assert!(AccessRules::new().subscribe("user/{sub}*").is_err());
        let rules = AccessRules::new().subscribe("user/{sub}/**").unwrap();
        let sub = |v: &'static str| move |n: &str| (n == "sub").then(|| v.to_owned());
        let four = rules.grant(sub("4"));
        assert!(four.may_subscribe(&topic("user/4/inbox")));
        assert!(!four.may_subscribe(&topic("user/42/inbox")));
        assert!(!four.may_subscribe(&topic("user/4")));
        // A value with `/` grants nothing at all, not even its own-looking topics.
        let slash = rules.grant(sub("42/inbox"));
        assert!(!slash.may_subscribe(&topic("user/42/inbox/x")));
        assert!(!slash.may_subscribe(&topic("user/42/inbox")));
        let exact = AccessRules::new().subscribe("user/{sub}").unwrap();
        assert!(!exact.grant(sub("42/x")).may_subscribe(&topic("user/42/x")));
        assert!(!exact.grant(sub("")).may_subscribe(&topic("user/")));
    }

    #[test]
    fn a_star_is_one_segment_and_two_stars_the_rest() {
        let one = AccessRules::new().publish("rooms/*").unwrap().grant(|_| None);
        assert!(one.may_publish(&topic("rooms/lobby")));
        assert!(!one.may_publish(&topic("rooms/a/b")));
        assert!(!one.may_publish(&topic("rooms/")));
        assert!(!one.may_publish(&topic("rooms")));
        assert!(!one.may_publish(&topic("roomsx/a")));
        assert!(!one.may_subscribe(&topic("rooms/lobby")));
        let rest = AccessRules::new().publish("rooms/**").unwrap().grant(|_| None);
        assert!(rest.may_publish(&topic("rooms/lobby")));
        assert!(rest.may_publish(&topic("rooms/a/b")));
        assert!(!rest.may_publish(&topic("rooms")));
        assert!(!rest.may_publish(&topic("rooms/")));
        assert!(!rest.may_publish(&topic("room/a")));
        let middle = AccessRules::new().publish("a/*/c").unwrap().grant(|_| None);
        assert!(middle.may_publish(&topic("a/b/c")));
        assert!(!middle.may_publish(&topic("a/b/x/c")));
        assert!(Access::everything().may_subscribe(&topic("x")));
        assert!(Access::everything().may_subscribe(&topic("/a//b/")));
        assert!(!AccessRules::new().grant(|_| None).may_publish(&topic("x")));
    }

    #[test]
    fn malformed_rules_are_refused() {
        for rule in [
            "",
            "a*b",
            "*a",
            "rooms*",
            "**/a",
            "user/{sub",
            "user/sub}",
            "user/{}",
            "user/{s b}",
            "{a}}",
            "{a}{b}",
            "user-{sub}",
            "user/{sub}*",
            "***",
        ] {
            assert!(AccessRules::new().subscribe(rule).is_err(), "{rule:?} accepted");
        }
        for rule in [
            "*",
            "**",
            "a",
            "user/{sub}",
            "{a}/{b}/**",
            "x/{a-b_1}/y/*",
            "/news",
        ] {
            assert!(AccessRules::new().subscribe(rule).is_ok(), "{rule:?} refused");
        }
    }
}
