//! The request headers of agent chat, parsed once. The caller hands over a
//! lookup by header name (case-insensitive), so these rules need no HTTP types.

use crate::agents::tools::ToolMode;
use crate::error::Error;
use crate::wire::ids::is_conversation_id;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ChatHeaders {
    pub tool_mode: Option<ToolMode>,
    pub conversation_id: Option<String>,
    pub turn_id: Option<String>,
    pub pii_mode: Option<String>,
    pub ag_ui: bool,
}

fn bad(header: &str, what: &str) -> Error {
    Error::bad_request("invalid_header", format!("{header} {what}")).with_param(header)
}

fn text<'a>(h: &impl Fn(&str) -> Option<&'a [u8]>, name: &str) -> Result<Option<&'a str>, Error> {
    match h(name) {
        None => Ok(None),
        // Visible ASCII and tabs only, as HTTP header text.
        Some(v) if v.iter().all(|b| *b == b'\t' || (0x20..0x7f).contains(b)) => {
            Ok(std::str::from_utf8(v).ok())
        }
        Some(_) => Err(bad(name, "must be plain ASCII text.")),
    }
}

/// Reads the `X-Service-*` headers through `h`, a lookup by name.
pub fn parse_headers<'a>(h: impl Fn(&str) -> Option<&'a [u8]>) -> Result<ChatHeaders, Error> {
    let h = &h;
    let mut out = ChatHeaders::default();
    if let Some(v) = text(h, "X-Service-Tool-Mode")? {
        out.tool_mode = Some(ToolMode::parse(v).ok_or_else(|| {
            bad(
                "X-Service-Tool-Mode",
                "must be off, read_only, ask or auto.",
            )
        })?);
    }
    for (name, slot) in [
        ("X-Service-Conversation-Id", &mut out.conversation_id),
        ("X-Service-Turn-Id", &mut out.turn_id),
    ] {
        if let Some(v) = text(h, name)? {
            if !is_conversation_id(v) {
                return Err(bad(name, "must be 1 to 128 of letters, digits and . _ : -"));
            }
            *slot = Some(v.to_string());
        }
    }
    if let Some(v) = text(h, "X-Service-PII-Mode")? {
        out.pii_mode = Some(v.to_string());
    }
    if let Some(v) = text(h, "X-Service-Events")? {
        if v != "ag-ui" {
            return Err(bad("X-Service-Events", "must be ag-ui."));
        }
        out.ag_ui = true;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a [u8]> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
        }
    }

    #[test]
    fn every_header_is_read() {
        let h = parse_headers(headers(&[
            ("x-service-tool-mode", "read_only"),
            ("x-service-conversation-id", "c-1"),
            ("x-service-turn-id", "t:2"),
            ("x-service-pii-mode", "redact"),
            ("x-service-events", "ag-ui"),
        ]))
        .unwrap();
        assert_eq!(h.tool_mode, Some(ToolMode::ReadOnly));
        assert_eq!(h.conversation_id.as_deref(), Some("c-1"));
        assert_eq!(h.turn_id.as_deref(), Some("t:2"));
        assert!(h.ag_ui);
    }

    #[test]
    fn bad_values_are_invalid_header_naming_the_header() {
        for (k, v) in [
            ("x-service-tool-mode", "sometimes"),
            ("x-service-conversation-id", "has space"),
            ("x-service-turn-id", &"x".repeat(129)),
            ("x-service-events", "all"),
        ] {
            let e = parse_headers(headers(&[(k, v)])).unwrap_err();
            assert_eq!(e.code, "invalid_header");
            assert!(e.message.to_lowercase().contains(k), "{}", e.message);
        }
        assert!(parse_headers(headers(&[("x-service-turn-id", &"x".repeat(128))])).is_ok());
    }
}
