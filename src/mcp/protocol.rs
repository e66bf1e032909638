//! The client side of the transport (contract: "Routes and transport",
//! "Errors on /mcp"): which protocol versions, which `Accept`,
//! `Content-Type` and `Origin` pass, and what one incoming JSON-RPC message
//! is. Plain functions; the route applies them in the table's order.

use axum::http::HeaderMap;
use serde_json::Value;

/// The protocol versions the gateway speaks to clients.
pub const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
/// What `initialize` answers to a version it does not know.
pub const LATEST: &str = "2025-11-25";

pub fn is_supported_version(v: &str) -> bool {
    VERSIONS.contains(&v)
}

/// The version `initialize` answers: the client's when we speak it.
pub fn answered_version(params: Option<&Value>) -> &'static str {
    let asked = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    VERSIONS
        .into_iter()
        .find(|v| Some(*v) == asked)
        .unwrap_or(LATEST)
}

/// The media types of `Accept` (parameters and case dropped).
fn media_types(h: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    h.get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// Whether `Accept` lists both `application/json` and `text/event-stream`
/// (as the Streamable HTTP transport requires of clients).
pub fn accepts_both(h: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for m in media_types(h) {
        json |= m == "application/json";
        sse |= m == "text/event-stream";
    }
    json && sse
}

/// Whether `Content-Type` is `application/json` (parameters allowed).
pub fn is_json_content(ct: Option<&str>) -> bool {
    ct.and_then(|c| c.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// `scheme://host[:port]` of a URL, lower-cased.
fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str()?;
    Some(
        match u.port() {
            Some(p) => format!("{}://{}:{}", u.scheme(), host, p),
            None => format!("{}://{}", u.scheme(), host),
        }
        .to_ascii_lowercase(),
    )
}

/// Whether a request's `Origin` may use the gateway: none sent, the
/// gateway's own (`public_url`), or the `Host` the request asked for.
pub fn origin_allowed(origin: Option<&str>, host: Option<&str>, public_url: &str) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    let Some(o) = origin_of(origin) else {
        return false;
    };
    if origin_of(public_url).is_some_and(|p| p == o) {
        return true;
    }
    // The Host asked for, on the origin's own scheme.
    let Some(host) = host else { return false };
    let Some((_, rest)) = o.split_once("://") else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    rest == host
        || origin_of(&format!("{}://{host}", &o[..o.find("://").unwrap_or(0)]))
            .is_some_and(|h| h == o)
}

/// One incoming JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Value,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A response to a request of ours (none in phase 1): accepted, dropped.
    Response,
}

impl Incoming {
    pub fn id(&self) -> Option<&Value> {
        match self {
            Incoming::Request { id, .. } => Some(id),
            _ => None,
        }
    }
    pub fn method(&self) -> Option<&str> {
        match self {
            Incoming::Request { method, .. } | Incoming::Notification { method, .. } => {
                Some(method)
            }
            Incoming::Response => None,
        }
    }
}

/// Reads one message: `Err((code, data code, message))` for the 400s.
pub fn parse(bytes: &[u8]) -> Result<Incoming, (i64, &'static str, String)> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| (-32700, "parse_error", format!("The body is not JSON: {e}.")))?;
    let invalid = |m: &str| (-32600, "invalid_request", m.to_string());
    let obj = match v {
        Value::Array(_) => {
            return Err(invalid(
                "Batches are not accepted: send one JSON-RPC message per request.",
            ))
        }
        Value::Object(o) => o,
        _ => return Err(invalid("The body is not a JSON-RPC 2.0 message.")),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("The message must carry \"jsonrpc\": \"2.0\"."));
    }
    let params = obj.get("params").cloned();
    if params
        .as_ref()
        .is_some_and(|p| !p.is_object() && !p.is_array())
    {
        return Err(invalid("params must be an object."));
    }
    let id = obj.get("id");
    if id.is_some_and(|i| !(i.is_string() || i.is_i64() || i.is_u64())) {
        return Err(invalid("id must be a string or an integer."));
    }
    match (obj.get("method"), id) {
        (Some(Value::String(m)), Some(id)) => Ok(Incoming::Request {
            id: id.clone(),
            method: m.clone(),
            params,
        }),
        (Some(Value::String(m)), None) => Ok(Incoming::Notification {
            method: m.clone(),
            params,
        }),
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {
            Ok(Incoming::Response)
        }
        _ => Err(invalid("The body is not a JSON-RPC 2.0 message.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    #[test]
    fn initialize_answers_the_clients_version_or_the_latest() {
        for v in VERSIONS {
            assert_eq!(answered_version(Some(&json!({"protocolVersion": v}))), v);
        }
        assert_eq!(
            answered_version(Some(&json!({"protocolVersion": "2024-11-05"}))),
            "2025-11-25"
        );
        assert_eq!(answered_version(None), "2025-11-25");
        assert!(!is_supported_version("2026-07-28"));
    }

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::ACCEPT,
            HeaderValue::from_str(v).expect("value"),
        );
        h
    }

    #[test]
    fn accept_must_list_json_and_event_stream() {
        assert!(accepts_both(&accept("application/json, text/event-stream")));
        assert!(accepts_both(&accept(
            "text/event-stream;q=0.9,Application/JSON"
        )));
        assert!(!accepts_both(&accept("application/json")));
        assert!(!accepts_both(&accept("*/*")));
        assert!(!accepts_both(&HeaderMap::new()));
    }

    #[test]
    fn content_type_must_be_json() {
        assert!(is_json_content(Some("application/json")));
        assert!(is_json_content(Some("application/json; charset=utf-8")));
        assert!(!is_json_content(Some("text/plain")));
        assert!(!is_json_content(None));
    }

    #[test]
    fn origin_is_the_public_url_or_the_host_asked_for() {
        let public = "https://gw.example.com";
        assert!(origin_allowed(None, Some("x"), public));
        assert!(origin_allowed(Some("https://gw.example.com"), None, public));
        assert!(origin_allowed(
            Some("http://127.0.0.1:8080"),
            Some("127.0.0.1:8080"),
            public
        ));
        assert!(!origin_allowed(
            Some("http://evil.example"),
            Some("127.0.0.1:8080"),
            public
        ));
        assert!(!origin_allowed(
            Some("null"),
            Some("127.0.0.1:8080"),
            public
        ));
        // The default port written out or not is the same origin.
        assert!(origin_allowed(
            Some("http://localhost"),
            Some("localhost:80"),
            public
        ));
    }

    #[test]
    fn messages_are_requests_notifications_or_responses() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Ok(Incoming::Request {
                id: json!(1),
                method: "ping".into(),
                params: None
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Incoming::Notification {
                method: "notifications/initialized".into(),
                params: None
            })
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Incoming::Response)
        );
    }

    #[test]
    fn bad_bodies_get_their_codes() {
        assert_eq!(parse(b"{nope").map_err(|e| e.1), Err("parse_error"));
        assert_eq!(
            parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).map_err(|e| e.1),
            Err("invalid_request")
        );
        assert_eq!(
            parse(br#"{"id":1,"method":"ping"}"#).map_err(|e| e.1),
            Err("invalid_request")
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#).map_err(|e| e.1),
            Err("invalid_request")
        );
        assert_eq!(parse(b"42").map_err(|e| e.1), Err("invalid_request"));
    }
}
