//! MCP servers ("upstreams") as the admin configures them: the model, and the
//! checks of every field a body or a `[[mcp_servers]]` table may carry. Input
//! is read from JSON values field by field, so each refusal names its field
//! (`param`), down to the map key (`tool_classes.write_note`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::agents::tools::ToolClass;
use crate::error::Error;
use crate::time::rfc3339;
pub use crate::users::mcp_grant::{is_pattern, is_server_name, MAX_NAME_LEN, MAX_PATTERN_LEN};

pub const MAX_URL_LEN: usize = 2048;
pub const MIN_TIMEOUT_S: u64 = 1;
pub const MAX_TIMEOUT_S: u64 = 3600;
pub const DEFAULT_TIMEOUT_S: u64 = 60;
pub const MAX_HEADERS: usize = 32;
/// A header name is an HTTP token; longer ones are mistakes, not credentials.
pub const MAX_HEADER_NAME_LEN: usize = 128;
pub const MAX_HEADER_VALUE_LEN: usize = 8192;
/// Allow-list patterns of one server.
pub const MAX_TOOL_PATTERNS: usize = 100;
pub const MAX_TOOL_CLASSES: usize = 1000;

/// Headers the gateway sets itself on every upstream request: a server's
/// `headers` may not replace them.
const RESERVED_HEADERS: [&str; 9] = [
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "mcp-protocol-version",
    "mcp-session-id",
    "te",
    "transfer-encoding",
];

/// How the gateway speaks to the upstream (only one value in phase 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    #[default]
    StreamableHttp,
}

impl Transport {
    pub fn parse(s: &str) -> Option<Transport> {
        (s == "streamable_http").then_some(Transport::StreamableHttp)
    }
    pub fn as_str(self) -> &'static str {
        "streamable_http"
    }
}

/// Where a server was defined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    #[default]
    Api,
    Config,
}

impl Source {
    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "api" => Some(Source::Api),
            "config" => Some(Source::Config),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Api => "api",
            Source::Config => "config",
        }
    }
}

/// A validated MCP server. `headers` hold the values in the clear: this
/// value lives in memory only (the store seals them), and [`McpServer::view`]
/// shows their names alone.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServer {
    pub name: String,
    pub url: String,
    pub transport: Transport,
    pub timeout_s: u64,
    /// Header name (case as given) -> value. Sorted by name.
    pub headers: BTreeMap<String, String>,
    /// Allow-list patterns (see [`crate::mcp::grants::pattern_matches`]).
    pub tools: Vec<String>,
    /// Upstream tool name -> class.
    pub tool_classes: BTreeMap<String, ToolClass>,
    pub source: Source,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Never prints header values (a `{:?}` in a log line must not leak them).
impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("timeout_s", &self.timeout_s)
            .field("header_names", &self.header_names())
            .field("tools", &self.tools)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// The header names as given, case kept, sorted.
    pub fn header_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.headers.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether the server's own allow-list lets `tool` (an upstream name) through.
    pub fn allows_tool(&self, tool: &str) -> bool {
        crate::mcp::grants::any_pattern_matches(&self.tools, tool)
    }

    /// The class an admin gave `tool` (upstream name), if any.
    pub fn configured_class(&self, tool: &str) -> Option<ToolClass> {
        self.tool_classes.get(tool).copied()
    }

    /// The admin view (`POST/GET /api/admin/mcp-servers`): header names only.
    pub fn view(&self) -> Value {
        let classes: Map<String, Value> = self
            .tool_classes
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.as_str().to_string())))
            .collect();
        json!({
            "name": self.name,
            "url": self.url,
            "transport": self.transport.as_str(),
            "timeout_s": self.timeout_s,
            "tools": self.tools,
            "tool_classes": classes,
            "header_names": self.header_names(),
            "source": self.source.as_str(),
            "created_at": rfc3339(self.created_at),
        })
    }
}

pub fn parse_name(v: &Value) -> Result<String, Error> {
    match v.as_str() {
        Some(s) if is_server_name(s) => Ok(s.to_string()),
        _ => Err(Error::validation(
            "name",
            format!("'name' must be 1 to {MAX_NAME_LEN} characters of a-z 0-9 -, starting with a letter or digit."),
        )),
    }
}

pub fn parse_url(v: &Value) -> Result<String, Error> {
    let bad = || {
        Error::validation(
            "url",
            format!("'url' must be an http(s) URL of at most {MAX_URL_LEN} characters, like http://127.0.0.1:9001/mcp."),
        )
    };
    let s = v.as_str().ok_or_else(bad)?.trim();
    if s.len() > MAX_URL_LEN {
        return Err(bad());
    }
    let url = url::Url::parse(s).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() || url.fragment().is_some()
    {
        return Err(bad());
    }
    Ok(s.to_string())
}

pub fn parse_transport(v: &Value) -> Result<Transport, Error> {
    v.as_str().and_then(Transport::parse).ok_or_else(|| {
        Error::validation(
            "transport",
            "'transport' must be streamable_http (the only transport for now).",
        )
    })
}

pub fn parse_timeout(v: &Value) -> Result<u64, Error> {
    v.as_u64()
        .filter(|t| (MIN_TIMEOUT_S..=MAX_TIMEOUT_S).contains(t))
        .ok_or_else(|| {
            Error::validation(
                "timeout_s",
                format!("'timeout_s' must be a whole number of seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S}."),
            )
        })
}

fn is_token_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

pub fn parse_headers(v: &Value) -> Result<BTreeMap<String, String>, Error> {
    let obj = v.as_object().ok_or_else(|| {
        Error::validation(
            "headers",
            "'headers' must be an object of header names to values.",
        )
    })?;
    if obj.len() > MAX_HEADERS {
        return Err(Error::validation(
            "headers",
            format!("'headers' may have at most {MAX_HEADERS} headers."),
        ));
    }
    let mut out = BTreeMap::new();
    let mut seen: Vec<String> = Vec::with_capacity(obj.len());
    for (name, value) in obj {
        let param = format!("headers.{name}");
        if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN || !name.bytes().all(is_token_char) {
            return Err(Error::validation(
                param,
                format!("The header name '{name}' must be 1 to {MAX_HEADER_NAME_LEN} characters of an HTTP token (letters, digits, - and the like)."),
            ));
        }
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(Error::validation(
                param,
                format!(
                    "The header '{name}' is set by the gateway itself and cannot be configured."
                ),
            ));
        }
        if seen.contains(&lower) {
            return Err(Error::validation(
                param,
                format!("The header '{name}' is given twice (header names ignore case)."),
            ));
        }
        seen.push(lower);
        // The value itself is never part of a message: it is a credential.
        let ok = value.as_str().filter(|s| {
            s.len() <= MAX_HEADER_VALUE_LEN
                && s.bytes()
                    .all(|c| c == b'\t' || (0x20..0x7f).contains(&c) || c >= 0x80)
        });
        let Some(value) = ok else {
            return Err(Error::validation(
                param,
                format!("The value of the header '{name}' must be a string of at most {MAX_HEADER_VALUE_LEN} bytes without control characters."),
            ));
        };
        out.insert(name.clone(), value.to_string());
    }
    Ok(out)
}

/// The server's allow-list: 0 to 100 patterns (`[]` allows no tool).
pub fn parse_tools(v: &Value) -> Result<Vec<String>, Error> {
    let list = v.as_array().ok_or_else(|| {
        Error::validation("tools", "'tools' must be a list of tool name patterns.")
    })?;
    if list.len() > MAX_TOOL_PATTERNS {
        return Err(Error::validation(
            "tools",
            format!("'tools' may list at most {MAX_TOOL_PATTERNS} patterns."),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, p)| match p.as_str() {
            Some(s) if is_pattern(s) => Ok(s.to_string()),
            _ => Err(Error::validation(
                format!("tools.{i}"),
                format!("'tools' entry {i} must be a pattern of 1 to {MAX_PATTERN_LEN} characters (* matches any run of characters)."),
            )),
        })
        .collect()
}

pub fn parse_tool_classes(v: &Value) -> Result<BTreeMap<String, ToolClass>, Error> {
    let obj = v.as_object().ok_or_else(|| {
        Error::validation(
            "tool_classes",
            "'tool_classes' must be an object of tool names to read, write or execute.",
        )
    })?;
    if obj.len() > MAX_TOOL_CLASSES {
        return Err(Error::validation(
            "tool_classes",
            format!("'tool_classes' may name at most {MAX_TOOL_CLASSES} tools."),
        ));
    }
    let mut out = BTreeMap::new();
    for (tool, class) in obj {
        let param = format!("tool_classes.{tool}");
        if !is_pattern(tool) || tool.contains('*') {
            return Err(Error::validation(
                param,
                format!("'{tool}' in 'tool_classes' must be a tool name of 1 to {MAX_PATTERN_LEN} characters."),
            ));
        }
        let class = class.as_str().and_then(ToolClass::parse).ok_or_else(|| {
            Error::validation(
                param.clone(),
                format!("'tool_classes.{tool}' must be one of read, write, execute."),
            )
        })?;
        out.insert(tool.clone(), class);
    }
    Ok(out)
}

const FIELDS: [&str; 7] = [
    "name",
    "url",
    "transport",
    "timeout_s",
    "headers",
    "tools",
    "tool_classes",
];

fn object(v: &Value) -> Result<&Map<String, Value>, Error> {
    v.as_object()
        .ok_or_else(|| Error::validation("body", "The body must be a JSON object."))
}

/// Refuses a field outside [`FIELDS`] (config tables: there it is a typo).
fn refuse_unknown(obj: &Map<String, Value>) -> Result<(), Error> {
    match obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        Some(k) => Err(Error::validation(
            k.as_str(),
            format!("unknown field `{k}`"),
        )),
        None => Ok(()),
    }
}

/// A present, non-null field.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// A new server from a `POST /api/admin/mcp-servers` body (`strict`: false;
/// unknown fields are ignored like elsewhere in `/api`) or a
/// `[[mcp_servers]]` table (`strict`: true).
pub fn parse_new(body: &Value, source: Source, strict: bool, now: i64) -> Result<McpServer, Error> {
    let obj = object(body)?;
    if strict {
        refuse_unknown(obj)?;
    }
    let name =
        field(obj, "name").ok_or_else(|| Error::validation("name", "'name' is required."))?;
    let url = field(obj, "url").ok_or_else(|| Error::validation("url", "'url' is required."))?;
    Ok(McpServer {
        name: parse_name(name)?,
        url: parse_url(url)?,
        transport: field(obj, "transport")
            .map(parse_transport)
            .transpose()?
            .unwrap_or_default(),
        timeout_s: field(obj, "timeout_s")
            .map(parse_timeout)
            .transpose()?
            .unwrap_or(DEFAULT_TIMEOUT_S),
        headers: field(obj, "headers")
            .map(parse_headers)
            .transpose()?
            .unwrap_or_default(),
        tools: field(obj, "tools")
            .map(parse_tools)
            .transpose()?
            .unwrap_or_else(|| vec!["*".to_string()]),
        tool_classes: field(obj, "tool_classes")
            .map(parse_tool_classes)
            .transpose()?
            .unwrap_or_default(),
        source,
        created_at: now,
        updated_at: now,
    })
}

/// `server` with a `PATCH` body applied: any field but `name`; `headers`
/// replaces them all. A field sent as null is refused (each has a value).
pub fn apply_patch(server: &McpServer, body: &Value, now: i64) -> Result<McpServer, Error> {
    let obj = object(body)?;
    let mut s = server.clone();
    for (k, v) in obj {
        if v.is_null() && FIELDS.contains(&k.as_str()) {
            return Err(Error::validation(
                k.as_str(),
                format!("'{k}' cannot be null."),
            ));
        }
        match k.as_str() {
            "name" if v.as_str() != Some(server.name.as_str()) => {
                return Err(Error::validation(
                    "name",
                    "A server's 'name' cannot change; delete it and add it under the new name.",
                ));
            }
            "url" => s.url = parse_url(v)?,
            "transport" => s.transport = parse_transport(v)?,
            "timeout_s" => s.timeout_s = parse_timeout(v)?,
            "headers" => s.headers = parse_headers(v)?,
            "tools" => s.tools = parse_tools(v)?,
            "tool_classes" => s.tool_classes = parse_tool_classes(v)?,
            _ => {}
        }
    }
    s.updated_at = now;
    Ok(s)
}

/// How a config problem names the `i`th `[[mcp_servers]]` table: its name, else its place.
pub fn file_server_label(raw: &Value, i: usize) -> String {
    raw.get("name")
        .and_then(Value::as_str)
        .map_or_else(|| format!("#{}", i + 1), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(body: Value) -> Result<McpServer, Error> {
        parse_new(&body, Source::Api, false, 7)
    }

    fn param_of(r: Result<McpServer, Error>) -> String {
        let e = r.expect_err("refused");
        assert_eq!(e.code, "validation_error");
        e.param.unwrap_or_default()
    }

    #[test]
    fn defaults_fill_transport_timeout_headers_tools_and_classes() {
        let s = new(json!({"name": "alpha", "url": "http://127.0.0.1:9001/mcp"})).expect("valid");
        assert_eq!(s.transport, Transport::StreamableHttp);
        assert_eq!(s.timeout_s, 60);
        assert!(s.headers.is_empty());
        assert_eq!(s.tools, vec!["*"]);
        assert!(s.tool_classes.is_empty());
        let v = s.view();
        assert_eq!(v["header_names"], json!([]));
        assert_eq!(v["source"], "api");
        assert_eq!(v["tool_classes"], json!({}));
    }

    #[test]
    fn names_are_1_to_32_of_lowercase_digits_and_dash_starting_with_letter_or_digit() {
        assert!(is_server_name(&"a".repeat(32)));
        assert!(!is_server_name(&"a".repeat(33)));
        assert!(is_server_name("9-lives"));
        for bad in ["", "-a", "Alpha", "a_b", "a b", "a.b", "é"] {
            assert!(!is_server_name(bad), "{bad}");
        }
        assert_eq!(
            param_of(new(json!({"name": "a_b", "url": "http://x"}))),
            "name"
        );
        assert_eq!(param_of(new(json!({"url": "http://x"}))), "name");
    }

    #[test]
    fn url_must_be_http_or_https_with_a_host() {
        for bad in ["ftp://x/mcp", "not a url", "http://", "/mcp", "http://x/#f"] {
            assert_eq!(
                param_of(new(json!({"name": "a", "url": bad}))),
                "url",
                "{bad}"
            );
        }
        assert!(new(json!({"name": "a", "url": "https://mcp.example.com/v1/mcp?x=1"})).is_ok());
        let long = format!("http://x/{}", "p".repeat(MAX_URL_LEN - 9));
        assert_eq!(long.len(), MAX_URL_LEN);
        assert!(new(json!({"name": "a", "url": long})).is_ok());
        assert_eq!(
            param_of(new(json!({"name": "a", "url": format!("{long}p")}))),
            "url"
        );
    }

    #[test]
    fn transport_is_streamable_http_only() {
        assert_eq!(
            param_of(new(
                json!({"name": "a", "url": "http://x", "transport": "sse"})
            )),
            "transport"
        );
    }

    #[test]
    fn timeout_is_1_to_3600_whole_seconds() {
        let t = |v: Value| new(json!({"name": "a", "url": "http://x", "timeout_s": v}));
        assert_eq!(t(json!(1)).expect("1").timeout_s, 1);
        assert_eq!(t(json!(3600)).expect("3600").timeout_s, 3600);
        for bad in [json!(0), json!(3601), json!(1.5), json!("60"), json!(-1)] {
            assert_eq!(param_of(t(bad.clone())), "timeout_s", "{bad}");
        }
    }

    #[test]
    fn header_names_are_tokens_not_reserved_and_named_in_the_param() {
        let h = |v: Value| new(json!({"name": "a", "url": "http://x", "headers": v}));
        let s = h(json!({"X-Api-Key": "k", "Authorization": "Bearer s"})).expect("valid");
        assert_eq!(
            s.view()["header_names"],
            json!(["Authorization", "X-Api-Key"])
        );
        assert_eq!(param_of(h(json!({"Bad Name": "v"}))), "headers.Bad Name");
        assert_eq!(
            param_of(h(json!({"Mcp-Session-Id": "v"}))),
            "headers.Mcp-Session-Id"
        );
        assert_eq!(param_of(h(json!({"X-A": "line\nbreak"}))), "headers.X-A");
        assert_eq!(param_of(h(json!({"X-A": 5}))), "headers.X-A");
        assert_eq!(param_of(h(json!({"X-A": "a", "x-a": "b"}))), "headers.x-a");
        let at = |n: usize| {
            let m: Map<String, Value> = (0..n).map(|i| (format!("X-{i}"), json!("v"))).collect();
            h(Value::Object(m))
        };
        assert!(at(MAX_HEADERS).is_ok());
        assert_eq!(param_of(at(MAX_HEADERS + 1)), "headers");
        assert!(h(json!({"X-A": "v".repeat(MAX_HEADER_VALUE_LEN)})).is_ok());
        assert_eq!(
            param_of(h(json!({"X-A": "v".repeat(MAX_HEADER_VALUE_LEN + 1)}))),
            "headers.X-A"
        );
    }

    #[test]
    fn refusals_never_repeat_a_header_value() {
        let e = new(json!({"name": "a", "url": "http://x", "headers": {"X-A": "secret\n"}}))
            .expect_err("refused");
        assert!(!e.message.contains("secret"), "{}", e.message);
        let s = new(json!({"name": "a", "url": "http://x", "headers": {"X-A": "s3cr3t"}}))
            .expect("valid");
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert!(!s.view().to_string().contains("s3cr3t"));
    }

    #[test]
    fn allow_list_holds_0_to_100_patterns_of_at_most_256_characters() {
        let t = |v: Value| new(json!({"name": "a", "url": "http://x", "tools": v}));
        assert_eq!(t(json!([])).expect("empty").tools, Vec::<String>::new());
        let n = |k: usize| Value::Array((0..k).map(|i| json!(format!("t{i}"))).collect());
        assert!(t(n(MAX_TOOL_PATTERNS)).is_ok());
        assert_eq!(param_of(t(n(MAX_TOOL_PATTERNS + 1))), "tools");
        assert!(t(json!(["x".repeat(MAX_PATTERN_LEN)])).is_ok());
        assert_eq!(
            param_of(t(json!(["ok", "x".repeat(MAX_PATTERN_LEN + 1)]))),
            "tools.1"
        );
        assert_eq!(param_of(t(json!([""]))), "tools.0");
    }

    #[test]
    fn classes_are_read_write_or_execute_and_the_param_names_the_tool() {
        let c = |v: Value| new(json!({"name": "a", "url": "http://x", "tool_classes": v}));
        let s = c(json!({"write_note": "write", "get": "read"})).expect("valid");
        assert_eq!(s.configured_class("write_note"), Some(ToolClass::Write));
        assert_eq!(
            param_of(c(json!({"write_note": "delete"}))),
            "tool_classes.write_note"
        );
        assert_eq!(param_of(c(json!([]))), "tool_classes");
    }

    #[test]
    fn config_tables_refuse_unknown_fields_and_bodies_ignore_them() {
        let body = json!({"name": "a", "url": "http://x", "tools_typo": []});
        assert!(parse_new(&body, Source::Api, false, 0).is_ok());
        let e = parse_new(&body, Source::Config, true, 0).expect_err("typo");
        assert_eq!(e.param.as_deref(), Some("tools_typo"));
    }

    #[test]
    fn patch_changes_fields_but_not_the_name_and_headers_replace_all() {
        let s = new(json!({"name": "a", "url": "http://x", "headers": {"A": "1", "B": "2"}}))
            .expect("valid");
        let p = apply_patch(&s, &json!({"timeout_s": 5, "headers": {"C": "3"}}), 9).expect("ok");
        assert_eq!(p.timeout_s, 5);
        assert_eq!(p.header_names(), vec!["C"]);
        assert_eq!(p.updated_at, 9);
        assert_eq!(p.created_at, s.created_at);
        assert!(apply_patch(&s, &json!({"name": "a"}), 9).is_ok());
        assert_eq!(
            apply_patch(&s, &json!({"name": "b"}), 9)
                .expect_err("rename")
                .param
                .as_deref(),
            Some("name")
        );
        assert_eq!(
            apply_patch(&s, &json!({"url": null}), 9)
                .expect_err("null")
                .param
                .as_deref(),
            Some("url")
        );
    }
}
