//! Who may subscribe to and publish on which topics: rules written once for the node, with
//! placeholders filled in from each connection's identity (a token's claims, say).
//!
//! A rule is a topic name, with two additions:
//! - `{name}` is replaced by the connection's value for `name` (`user/{sub}` with `sub = "42"`
//!   grants `user/42`). A connection without that value is granted nothing by the rule. The value
//!   is taken literally: a `*` or `{` in it is not a pattern.
//! - a `*` at the very end grants every topic that starts with what comes before it (`rooms/*`
//!   grants `rooms/lobby` and `rooms/a/b`; `*` alone grants every topic).
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

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    parts: Vec<Part>,
    any_suffix: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Value(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Grant {
    text: String,
    any_suffix: bool,
}

impl AccessRules {
    /// No rules: grants nothing.
    pub fn new() -> AccessRules {
        AccessRules::default()
    }

    /// Every connection may subscribe to and publish on every topic (a node without auth).
    pub fn allow_all() -> AccessRules {
        let all = Rule {
            parts: Vec::new(),
            any_suffix: true,
        };
        AccessRules {
            subscribe: vec![all.clone()],
            publish: vec![all],
        }
    }

    /// Adds a rule for subscribing. Errors on a malformed rule (an unclosed `{`, an empty or
    /// invalid placeholder name, a `*` before the end).
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
        let (body, any_suffix) = match rule.strip_suffix('*') {
            Some(body) => (body, true),
            None => (rule, false),
        };
        if body.contains('*') {
            return Err(bad("`*` is allowed only at the very end"));
        }
        if !any_suffix && body.is_empty() {
            return Err(bad("an empty rule grants nothing; `*` grants every topic"));
        }
        let mut parts = Vec::new();
        let mut rest = body;
        while let Some(open) = rest.find(['{', '}']) {
            if rest.as_bytes()[open] == b'}' {
                return Err(bad("a `}` without its `{`"));
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let after = &rest[open + 1..];
            let close = after.find('}').ok_or_else(|| bad("a `{` without its `}`"))?;
            let name = &after[..close];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(bad(
                    "a placeholder is `{name}`, the name made of letters, digits, `_` and `-`",
                ));
            }
            parts.push(Part::Value(name.to_owned()));
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Rule { parts, any_suffix })
    }

    fn fill(&self, value: &impl Fn(&str) -> Option<String>) -> Option<Grant> {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                // An empty value would widen `user/{sub}*`-like rules to everyone's topics.
                Part::Value(name) => text.push_str(&value(name).filter(|v| !v.is_empty())?),
            }
        }
        Some(Grant {
            text,
            any_suffix: self.any_suffix,
        })
    }
}

impl Grant {
    fn matches(&self, topic: &str) -> bool {
        if self.any_suffix {
            topic.starts_with(&self.text)
        } else {
            topic == self.text
        }
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
        assert!(!rules.grant(|_| None).may_subscribe(&topic("user//")));
        assert!(!rules.grant(values("")).may_subscribe(&topic("user//t1")));
    }

    #[test]
    fn a_trailing_star_grants_the_prefix_and_nothing_else() {
        let access = AccessRules::new().publish("rooms/*").unwrap().grant(|_| None);
        assert!(access.may_publish(&topic("rooms/lobby")));
        assert!(access.may_publish(&topic("rooms/a/b")));
        assert!(!access.may_publish(&topic("room")));
        assert!(!access.may_subscribe(&topic("rooms/lobby")));
        assert!(Access::everything().may_subscribe(&topic("x")));
        assert!(!AccessRules::new().grant(|_| None).may_publish(&topic("x")));
    }

    #[test]
    fn malformed_rules_are_refused() {
        for rule in [
            "",
            "a*b",
            "*a",
            "user/{sub",
            "user/sub}",
            "user/{}",
            "user/{s b}",
            "{a}}",
        ] {
            assert!(AccessRules::new().subscribe(rule).is_err(), "{rule:?} accepted");
        }
        for rule in ["*", "a", "user/{sub}", "{a}{b}*", "x/{a-b_1}/y*"] {
            assert!(AccessRules::new().subscribe(rule).is_ok(), "{rule:?} refused");
        }
    }
}
