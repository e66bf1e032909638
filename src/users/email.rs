//! An e-mail address, parsed once: trimmed, lower-cased (logins are
//! case-insensitive) and checked for the shape `local@domain.tld`.

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    pub fn parse(raw: &str) -> Result<Email> {
        let e = raw.trim().to_lowercase();
        let valid = e.len() <= 254
            && !e.chars().any(|c| c.is_whitespace() || c.is_control())
            && matches!(e.split_once('@'), Some((l, d)) if !l.is_empty() && d.contains('.') && !d.starts_with('.') && !d.ends_with('.') && !d.contains('@'));
        if valid {
            Ok(Email(e))
        } else {
            Err(Error::validation(
                "email",
                "'email' must be an e-mail address.",
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// The part after the `@`.
    pub fn domain(&self) -> &str {
        self.0.rsplit_once('@').map_or("", |(_, d)| d)
    }
}

impl std::fmt::Display for Email {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_is_trimmed_and_lower_cased() {
        let e = Email::parse("  Ann@Example.COM ").unwrap();
        assert_eq!(e.as_str(), "ann@example.com");
        assert_eq!(e.domain(), "example.com");
    }

    #[test]
    fn malformed_addresses_are_refused_naming_the_field() {
        for bad in [
            "",
            "ann",
            "ann@",
            "@example.com",
            "ann@example",
            "a b@example.com",
            "ann@.com",
            "ann@example.com.",
        ] {
            let err = Email::parse(bad).unwrap_err();
            assert_eq!(err.code, "validation_error", "{bad}");
            assert_eq!(err.param.as_deref(), Some("email"));
        }
    }
}
