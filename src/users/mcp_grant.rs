//! The `mcp` grant of API keys, users and agents, its patterns, and the names
//! it may hold. It lives with the users because keys, users and agents carry it
//! (below `agents` and `mcp`); the effective access over servers is
//! `mcp::grants`. Deny by default: no grant (`None`) is no access.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind};

/// A server name's longest form.
pub const MAX_NAME_LEN: usize = 32;

/// A pattern or a tool name (MCP tool names are at most 128 characters;
/// a pattern may add `*`s).
pub const MAX_PATTERN_LEN: usize = 256;

/// Whether `s` is a server name: 1 to 32 of `a-z 0-9 -`, starting with a
/// letter or digit. No `_`, so `server__tool` splits at its first `__`.
pub fn is_server_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME_LEN
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
}

/// One pattern (allow-lists and grants): 1 to 256 characters, no control
/// characters.
pub fn is_pattern(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= MAX_PATTERN_LEN && !s.chars().any(char::is_control)
}

/// A grant's `tools` holds 1 to 100 patterns per server.
pub const MAX_GRANT_PATTERNS: usize = 100;
/// Names in `servers` (more is a mistake: there are not that many servers).
pub const MAX_GRANT_SERVERS: usize = 1000;

/// `{"servers": [...] | ["*"], "tools"?: {server: [patterns]}}` as stored and
/// shown (`tools` absent when it was not given).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpGrant {
    pub servers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeMap<String, Vec<String>>>,
}

/// `*` matches any run of characters (also none); everything else is literal.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Greedy match with backtracking to the last `*`: linear in practice,
    // O(len(p) * len(n)) at worst (both are at most a few hundred).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

pub fn any_pattern_matches(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| pattern_matches(p, name))
}

impl McpGrant {
    /// Whether the grant names `server` (or `*`).
    pub fn names_server(&self, server: &str) -> bool {
        self.servers.iter().any(|s| s == "*" || s == server)
    }

    /// Whether the grant lets `tool` (upstream name) of `server` through. A
    /// server without a `tools` entry allows all its tools.
    pub fn allows_tool(&self, server: &str, tool: &str) -> bool {
        self.names_server(server)
            && self
                .tools
                .as_ref()
                .and_then(|t| t.get(server))
                .is_none_or(|patterns| any_pattern_matches(patterns, tool))
    }

    /// The grant without `server` (it was deleted): out of `servers` and
    /// `tools`. Returns whether anything changed.
    pub fn forget_server(&mut self, server: &str) -> bool {
        let before = self.servers.len();
        self.servers.retain(|s| s != server);
        let mut changed = self.servers.len() != before;
        if let Some(t) = self.tools.as_mut() {
            changed |= t.remove(server).is_some();
        }
        changed
    }

    /// The stored text (`None` for no grant).
    pub fn to_db(grant: Option<&McpGrant>) -> Option<String> {
        // Serialising strings, lists and maps cannot fail.
        grant.map(|g| serde_json::to_string(g).unwrap_or_default())
    }

    /// Reads a stored grant. Unreadable text grants nothing (fail closed).
    pub fn from_db_or_closed(text: Option<&str>, owner: &str) -> Option<McpGrant> {
        let text = text?;
        match serde_json::from_str::<McpGrant>(text) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::error!(owner = %owner, error = %e, "the stored mcp grant cannot be read: it grants nothing");
                Some(McpGrant::default())
            }
        }
    }

    /// Checks an `mcp` field as sent (`null` → `None`). `exists` says
    /// whether a server of that name is configured.
    pub fn parse(v: &Value, exists: impl Fn(&str) -> bool) -> Result<Option<McpGrant>, Error> {
        if v.is_null() {
            return Ok(None);
        }
        let obj = v.as_object().ok_or_else(|| {
            Error::validation(
                "mcp",
                "'mcp' must be null or an object {\"servers\": [...], \"tools\": {...}}.",
            )
        })?;
        if let Some(k) = obj.keys().find(|k| *k != "servers" && *k != "tools") {
            return Err(Error::validation(
                format!("mcp.{k}"),
                format!("'mcp' has no field '{k}'; it takes 'servers' and 'tools'."),
            ));
        }
        let servers = obj
            .get("servers")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                Error::validation(
                    "mcp.servers",
                    "'mcp.servers' must be a list of server names, or [\"*\"] for every server.",
                )
            })?;
        if servers.len() > MAX_GRANT_SERVERS {
            return Err(Error::validation(
                "mcp.servers",
                format!("'mcp.servers' may list at most {MAX_GRANT_SERVERS} servers."),
            ));
        }
        let mut names: Vec<String> = Vec::with_capacity(servers.len());
        for s in servers {
            let name = s.as_str().ok_or_else(|| {
                Error::validation("mcp.servers", "'mcp.servers' must list names (strings).")
            })?;
            if name != "*" && !(is_server_name(name) && exists(name)) {
                return Err(not_found("mcp.servers", name));
            }
            if !names.iter().any(|n| n == name) {
                names.push(name.to_string());
            }
        }
        let tools = match obj.get("tools") {
            None | Some(Value::Null) => None,
            Some(t) => Some(parse_tools(t, &exists)?),
        };
        Ok(Some(McpGrant {
            servers: names,
            tools,
        }))
    }
}

fn not_found(param: &str, name: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        "mcp_server_not_found",
        format!(
            "There is no MCP server '{name}' ('{param}'); GET /api/admin/mcp-servers lists them."
        ),
    )
    .with_param(param)
}

fn parse_tools(
    v: &Value,
    exists: &impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, Vec<String>>, Error> {
    let obj = v.as_object().ok_or_else(|| {
        Error::validation(
            "mcp.tools",
            "'mcp.tools' must be an object of server names to lists of tool name patterns.",
        )
    })?;
    let mut out = BTreeMap::new();
    for (server, patterns) in obj {
        let param = format!("mcp.tools.{server}");
        if !(is_server_name(server) && exists(server)) {
            return Err(not_found("mcp.tools", server));
        }
        let list = patterns
            .as_array()
            .filter(|l| (1..=MAX_GRANT_PATTERNS).contains(&l.len()))
            .ok_or_else(|| {
                Error::validation(
                    param.clone(),
                    format!("'{param}' must list 1 to {MAX_GRANT_PATTERNS} tool name patterns."),
                )
            })?;
        let mut kept = Vec::with_capacity(list.len());
        for p in list {
            match p.as_str() {
                Some(s) if is_pattern(s) => kept.push(s.to_string()),
                _ => {
                    return Err(Error::validation(
                        param.clone(),
                        format!("'{param}' holds patterns of 1 to {MAX_PATTERN_LEN} characters (* matches any run of characters)."),
                    ))
                }
            }
        }
        out.insert(server.clone(), kept);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grant(v: Value) -> McpGrant {
        McpGrant::parse(&v, |s| ["alpha", "beta"].contains(&s))
            .expect("valid")
            .expect("some")
    }

    #[test]
    fn star_matches_any_run_and_everything_else_is_literal() {
        assert!(pattern_matches("*", ""));
        assert!(pattern_matches("*", "anything"));
        assert!(pattern_matches("get_*", "get_"));
        assert!(pattern_matches("get_*", "get_order"));
        assert!(!pattern_matches("get_*", "xget_order"));
        assert!(pattern_matches("*_note", "write_note"));
        assert!(pattern_matches("a*b*c", "aXXbYYc"));
        assert!(pattern_matches("a*b*c", "abbc"));
        assert!(!pattern_matches("a*b*c", "aXXbYY"));
        assert!(pattern_matches("add", "add"));
        assert!(!pattern_matches("add", "adds"));
        // `?`, `.`, `[` are literal characters, not wildcards.
        assert!(!pattern_matches("a?c", "abc"));
        assert!(pattern_matches("a.c", "a.c"));
        assert!(!pattern_matches("a.c", "abc"));
        assert!(pattern_matches("[x]", "[x]"));
        assert!(pattern_matches("ü*", "über"));
    }

    #[test]
    fn grants_name_existing_servers_or_star() {
        let e =
            McpGrant::parse(&json!({"servers": ["gamma"]}), |s| s == "alpha").expect_err("unknown");
        assert_eq!(e.code, "mcp_server_not_found");
        assert_eq!(e.status(), 400);
        assert_eq!(e.param.as_deref(), Some("mcp.servers"));
        assert_eq!(McpGrant::parse(&Value::Null, |_| true).expect("null"), None);
        let g = grant(json!({"servers": ["alpha", "alpha", "*"]}));
        assert_eq!(g.servers, vec!["alpha", "*"]);
        assert_eq!(g.tools, None);
        // Shown as stored: `tools` absent when it was not given.
        assert_eq!(
            serde_json::to_value(&g).expect("json"),
            json!({"servers": ["alpha", "*"]})
        );
        let e = McpGrant::parse(
            &json!({"servers": ["alpha"], "tools": {"gamma": ["x"]}}),
            |s| s == "alpha",
        )
        .expect_err("unknown");
        assert_eq!(e.code, "mcp_server_not_found");
        for bad in [
            json!({}),
            json!({"servers": "alpha"}),
            json!([]),
            json!({"servers": [], "x": 1}),
        ] {
            assert_eq!(
                McpGrant::parse(&bad, |_| true).expect_err("bad").code,
                "validation_error",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_grant_holds_1_to_100_patterns_per_server() {
        let with = |n: usize| {
            let list: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
            McpGrant::parse(
                &json!({"servers": ["alpha"], "tools": {"alpha": list}}),
                |_| true,
            )
        };
        assert!(with(1).is_ok());
        assert!(with(MAX_GRANT_PATTERNS).is_ok());
        for n in [0, MAX_GRANT_PATTERNS + 1] {
            let e = with(n).expect_err("out of range");
            assert_eq!(e.param.as_deref(), Some("mcp.tools.alpha"), "{n}");
        }
    }

    #[test]
    fn forgetting_a_server_removes_it_from_servers_and_tools() {
        let mut g = grant(json!({"servers": ["alpha"], "tools": {"alpha": ["x"]}}));
        assert!(g.forget_server("alpha"));
        assert_eq!(
            serde_json::to_value(&g).expect("json"),
            json!({"servers": [], "tools": {}})
        );
        assert!(!g.forget_server("alpha"));
        let mut star = grant(json!({"servers": ["*"]}));
        assert!(!star.forget_server("alpha"));
        assert!(star.names_server("alpha"));
    }

    #[test]
    fn an_unreadable_stored_grant_grants_nothing() {
        let g = McpGrant::from_db_or_closed(Some("not json"), "k1").expect("closed grant");
        assert!(!g.names_server("alpha"));
        assert_eq!(McpGrant::from_db_or_closed(None, "k1"), None);
        let stored = McpGrant::to_db(Some(&grant(json!({"servers": ["alpha"]}))));
        assert_eq!(
            McpGrant::from_db_or_closed(stored.as_deref(), "k1"),
            Some(grant(json!({"servers": ["alpha"]})))
        );
    }
}
