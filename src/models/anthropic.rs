//! The settings of an `anthropic` provider: the `anthropic-version` it sends
//! when the client sent none, and what happens to a client's
//! `anthropic-beta` (forwarded, dropped, or filtered to a list).

use serde_json::Value;

use crate::error::Error;

/// `anthropic-version` when neither the client nor the provider names one.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// The most values a `beta_headers` list may hold.
pub const MAX_BETA_VALUES: usize = 64;

/// What goes upstream of a client's `anthropic-beta`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BetaHeaders {
    /// The client's header as sent.
    #[default]
    Forward,
    /// Never sent.
    Drop,
    /// The client's comma-separated values that are in the list, in the
    /// client's order; no header when none remain.
    Allow(Vec<String>),
}

fn beta_error() -> Error {
    Error::validation(
        "beta_headers",
        format!(
            "'beta_headers' must be \"forward\", \"drop\" or a list of at most {MAX_BETA_VALUES} beta names (1 to 128 characters each, no commas or spaces)."
        ),
    )
}

fn beta_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b',' && b != b'"')
}

impl BetaHeaders {
    /// The API's and TOML's value: `"forward"`, `"drop"` or a list of names.
    pub fn from_json(v: &Value) -> Result<Self, Error> {
        match v {
            Value::String(s) if s == "forward" => Ok(BetaHeaders::Forward),
            Value::String(s) if s == "drop" => Ok(BetaHeaders::Drop),
            Value::Array(items) if items.len() <= MAX_BETA_VALUES => items
                .iter()
                .map(|i| match i {
                    Value::String(s) if beta_name_ok(s) => Ok(s.clone()),
                    _ => Err(beta_error()),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(BetaHeaders::Allow),
            _ => Err(beta_error()),
        }
    }

    /// As stored: `forward`, `drop` or a JSON array.
    pub fn stored(&self) -> String {
        match self {
            BetaHeaders::Forward => "forward".into(),
            BetaHeaders::Drop => "drop".into(),
            BetaHeaders::Allow(list) => serde_json::to_string(list).unwrap_or_else(|_| "[]".into()),
        }
    }

    /// From the stored text; what cannot be read forwards nothing (fail closed).
    pub fn from_stored(s: Option<&str>) -> Self {
        match s {
            None | Some("forward") => BetaHeaders::Forward,
            Some("drop") => BetaHeaders::Drop,
            Some(list) => match serde_json::from_str::<Vec<String>>(list) {
                Ok(l) => BetaHeaders::Allow(l),
                Err(_) => {
                    tracing::warn!("a provider's beta_headers cannot be read; none are sent");
                    BetaHeaders::Drop
                }
            },
        }
    }

    /// As the API shows it.
    pub fn view(&self) -> Value {
        match self {
            BetaHeaders::Forward => Value::from("forward"),
            BetaHeaders::Drop => Value::from("drop"),
            BetaHeaders::Allow(l) => Value::from(l.clone()),
        }
    }

    /// The `anthropic-beta` to send for the client's (None: no header).
    pub fn filter(&self, client: Option<&str>) -> Option<String> {
        let client = client?;
        match self {
            BetaHeaders::Forward => Some(client.to_string()),
            BetaHeaders::Drop => None,
            BetaHeaders::Allow(list) => {
                let kept: Vec<&str> = client
                    .split(',')
                    .map(str::trim)
                    .filter(|v| !v.is_empty() && list.iter().any(|a| a == v))
                    .collect();
                (!kept.is_empty()).then(|| kept.join(","))
            }
        }
    }
}

/// Checks an `anthropic_version` value: 1 to 64 visible ASCII characters.
pub fn check_version(v: &str) -> Result<(), Error> {
    if !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(Error::validation(
            "anthropic_version",
            "'anthropic_version' must be 1 to 64 visible characters, such as 2023-06-01.",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn beta_headers_accept_forward_drop_or_a_list() {
        assert_eq!(
            BetaHeaders::from_json(&json!("forward")).unwrap(),
            BetaHeaders::Forward
        );
        assert_eq!(
            BetaHeaders::from_json(&json!("drop")).unwrap(),
            BetaHeaders::Drop
        );
        assert_eq!(
            BetaHeaders::from_json(&json!(["a-1", "b-2"])).unwrap(),
            BetaHeaders::Allow(vec!["a-1".into(), "b-2".into()])
        );
        for bad in [
            json!("keep"),
            json!(1),
            json!(["a,b"]),
            json!([""]),
            json!([3]),
            json!(null),
        ] {
            let e = BetaHeaders::from_json(&bad).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("beta_headers"), "{bad}");
            assert!(e.message.contains("beta_headers"));
        }
        let at_limit: Vec<String> = (0..MAX_BETA_VALUES).map(|i| format!("b{i}")).collect();
        assert!(BetaHeaders::from_json(&json!(at_limit)).is_ok());
        let past: Vec<String> = (0..=MAX_BETA_VALUES).map(|i| format!("b{i}")).collect();
        assert!(BetaHeaders::from_json(&json!(past)).is_err());
    }

    #[test]
    fn a_list_keeps_the_clients_allowed_values_in_the_clients_order() {
        let allow = BetaHeaders::Allow(vec!["x".into(), "a".into()]);
        assert_eq!(allow.filter(Some("a, b,x")).as_deref(), Some("a,x"));
        assert_eq!(allow.filter(Some("b,c")), None);
        assert_eq!(allow.filter(None), None);
        assert_eq!(
            BetaHeaders::Forward.filter(Some("a, b")).as_deref(),
            Some("a, b")
        );
        assert_eq!(BetaHeaders::Drop.filter(Some("a")), None);
    }

    #[test]
    fn stored_values_read_back_and_unreadable_ones_send_nothing() {
        for b in [
            BetaHeaders::Forward,
            BetaHeaders::Drop,
            BetaHeaders::Allow(vec!["a".into()]),
        ] {
            assert_eq!(BetaHeaders::from_stored(Some(&b.stored())), b);
        }
        assert_eq!(BetaHeaders::from_stored(None), BetaHeaders::Forward);
        assert_eq!(BetaHeaders::from_stored(Some("{bad")), BetaHeaders::Drop);
    }
}
