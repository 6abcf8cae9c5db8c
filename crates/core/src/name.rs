//! Validated topic and event names.

use std::fmt;
use std::sync::Arc;

use crate::error::{EventNameError, TopicNameError};

/// Longest topic name accepted, in bytes.
pub const MAX_TOPIC_LEN: usize = 128;

/// A validated topic name: 1 to [`MAX_TOPIC_LEN`] characters from `[A-Za-z0-9_.:@-]`.
///
/// The set is deliberately narrow: a valid name never needs escaping in JSON, SSE or a URL
/// query, never contains `/`, whitespace or control characters, and cannot collide with the
/// `,` and `=` separators of a resume list. Cloning is a reference-count bump.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName(Arc<str>);

impl TopicName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, TopicNameError> {
        validate_topic(name)?;
        Ok(Self(Arc::from(name)))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Validates what a client may subscribe to: a topic name, or a prefix pattern
    /// `<prefix>*` ([`validate_pattern`]), which is held as a `TopicName` that
    /// [`Self::is_pattern`] (`*` is not a topic character, so the two never collide).
    pub fn subscription(name: &str) -> Result<Self, TopicNameError> {
        if name.ends_with('*') {
            validate_pattern(name)?;
            return Ok(Self(Arc::from(name)));
        }
        Self::new(name)
    }

    /// Whether this is a prefix pattern (`orders.*`) rather than a topic.
    pub fn is_pattern(&self) -> bool {
        self.0.ends_with('*')
    }

    /// A pattern's prefix (`orders.` of `orders.*`); a topic's whole name.
    pub fn prefix(&self) -> &str {
        self.0.strip_suffix('*').unwrap_or(&self.0)
    }
}

/// Checks `name` against the topic name rules without allocating.
pub fn validate_topic(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name.len() > MAX_TOPIC_LEN {
        return Err(TopicNameError::TooLong { max: MAX_TOPIC_LEN });
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '@' | '-')))
    {
        Some(c) => Err(TopicNameError::BadChar(c)),
        None => Ok(()),
    }
}

/// Namespaces no pattern may cover: the personal topics (`user:<sub>`, `conn:<id>`).
const PERSONAL: [&str; 2] = ["user:", "conn:"];

/// Checks a prefix pattern `<prefix>*`: the prefix is a valid topic name ending in `.` or
/// `:`, not in a personal namespace ([`crate::pattern`]).
pub fn validate_pattern(pattern: &str) -> Result<(), TopicNameError> {
    let Some(prefix) = pattern.strip_suffix('*') else {
        return Err(TopicNameError::BadPattern("a pattern ends with `*`"));
    };
    if prefix.is_empty() {
        return Err(TopicNameError::BadPattern(
            "a bare `*` would match every topic; give a prefix ending in `.` or `:`, such as `orders.*`",
        ));
    }
    if pattern.len() > MAX_TOPIC_LEN {
        return Err(TopicNameError::TooLong { max: MAX_TOPIC_LEN });
    }
    validate_topic(prefix)?;
    if !prefix.ends_with(['.', ':']) {
        return Err(TopicNameError::BadPattern(
            "`*` must follow `.` or `:` and stand last (`orders.*`): it matches whole name segments",
        ));
    }
    if PERSONAL.iter().any(|p| prefix.starts_with(p)) {
        return Err(TopicNameError::BadPattern(
            "personal topics (`user:`, `conn:`) cannot be matched by a pattern",
        ));
    }
    Ok(())
}

impl fmt::Display for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TopicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::borrow::Borrow<str> for TopicName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Longest event name accepted, in bytes.
pub const MAX_EVENT_LEN: usize = 64;

/// A validated event name: 1 to [`MAX_EVENT_LEN`] characters from `[A-Za-z0-9_.:-]`, not
/// starting with the reserved `herald.` prefix. It goes verbatim into SSE `event:` lines and
/// JSON strings, so nothing in it may need escaping.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct EventName(Arc<str>);

impl EventName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, EventNameError> {
        if name.is_empty() {
            return Err(EventNameError::Empty);
        }
        if name.len() > MAX_EVENT_LEN {
            return Err(EventNameError::TooLong { max: MAX_EVENT_LEN });
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
        {
            return Err(EventNameError::BadChar(c));
        }
        if name.starts_with("herald.") {
            return Err(EventNameError::Reserved);
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_set() {
        for ok in [
            "a",
            "orders.eu-1",
            "user:alice@example.com",
            "A_b.C:d@e-f",
            &"x".repeat(128),
        ] {
            assert!(TopicName::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        assert_eq!(TopicName::new(""), Err(TopicNameError::Empty));
        assert_eq!(
            TopicName::new(&"x".repeat(129)),
            Err(TopicNameError::TooLong { max: 128 })
        );
        for (bad, c) in [
            ("a/b", '/'),
            ("../etc", '/'),
            ("a b", ' '),
            ("a\nb", '\n'),
            ("a,b", ','),
            ("a=b", '='),
            ("caf\u{e9}", '\u{e9}'),
            ("a\u{202e}b", '\u{202e}'),
            ("a\0", '\0'),
        ] {
            assert_eq!(
                TopicName::new(bad),
                Err(TopicNameError::BadChar(c)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn event_names() {
        assert!(EventName::new("order.created").is_ok());
        assert_eq!(EventName::new("herald.lost"), Err(EventNameError::Reserved));
        assert_eq!(EventName::new("a\nb"), Err(EventNameError::BadChar('\n')));
        assert_eq!(EventName::new("a b"), Err(EventNameError::BadChar(' ')));
        assert_eq!(EventName::new(""), Err(EventNameError::Empty));
    }
}
