//! The effective access to MCP servers and tools: the server's allow-list ∩
//! the user's grant ∩ the key's (or the agent's) grant. The grant itself is
//! `users::mcp_grant`.

pub use crate::users::mcp_grant::{any_pattern_matches, pattern_matches, McpGrant};

/// The caller's two grants: the user's and the key's (API key) or the
/// agent's (agent access token). Both must allow.
#[derive(Clone, Copy, Debug)]
pub struct Grants<'a> {
    pub user: Option<&'a McpGrant>,
    /// The key's grant, or the agent's.
    pub credential: Option<&'a McpGrant>,
}

impl Grants<'_> {
    /// Whether the caller may use `server` at all (`POST /mcp/{server}`, and
    /// which upstreams `/mcp` initializes).
    pub fn server_granted(&self, server: &str) -> bool {
        self.user.is_some_and(|g| g.names_server(server))
            && self.credential.is_some_and(|g| g.names_server(server))
    }

    /// Effective access to one tool (upstream name): the server's
    /// allow-list ∩ the user's grant ∩ the key's or agent's grant.
    pub fn tool_allowed(&self, server: &crate::mcp::McpServer, tool: &str) -> bool {
        server.allows_tool(tool)
            && self.user.is_some_and(|g| g.allows_tool(&server.name, tool))
            && self
                .credential
                .is_some_and(|g| g.allows_tool(&server.name, tool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::Value;

    fn grant(v: Value) -> McpGrant {
        McpGrant::parse(&v, |s| ["alpha", "beta"].contains(&s))
            .expect("valid")
            .expect("some")
    }

    fn server(tools: &[&str]) -> crate::mcp::McpServer {
        let body = json!({"name": "alpha", "url": "http://x", "tools": tools});
        crate::mcp::servers::parse_new(&body, crate::mcp::servers::Source::Api, false, 0)
            .expect("valid")
    }

    #[test]
    fn no_grant_is_no_access_and_both_grants_must_name_the_server() {
        let all = grant(json!({"servers": ["*"]}));
        let alpha = grant(json!({"servers": ["alpha"]}));
        let s = server(&["*"]);
        let none = Grants {
            user: None,
            credential: Some(&all),
        };
        assert!(!none.server_granted("alpha"));
        assert!(!none.tool_allowed(&s, "add"));
        let g = Grants {
            user: Some(&all),
            credential: Some(&alpha),
        };
        assert!(g.server_granted("alpha"));
        assert!(!g.server_granted("beta"));
        assert!(g.tool_allowed(&s, "add"));
        let g = Grants {
            user: Some(&alpha),
            credential: None,
        };
        assert!(!g.server_granted("alpha"));
        // "*" covers servers added later, by any name.
        assert!(all.names_server("gamma"));
    }

    #[test]
    fn effective_tool_access_is_the_intersection_of_allow_list_and_both_grants() {
        let user = grant(json!({"servers": ["alpha"], "tools": {"alpha": ["get_*", "add"]}}));
        let key = grant(json!({"servers": ["*"], "tools": {"alpha": ["get_order", "add", "sub"]}}));
        let s = server(&["get_*", "sub"]);
        let g = Grants {
            user: Some(&user),
            credential: Some(&key),
        };
        assert!(g.tool_allowed(&s, "get_order"));
        assert!(
            !g.tool_allowed(&s, "get_user"),
            "the key's list leaves it out"
        );
        assert!(
            !g.tool_allowed(&s, "add"),
            "the server's allow-list leaves it out"
        );
        assert!(!g.tool_allowed(&s, "sub"), "the user's list leaves it out");
        let empty = server(&[]);
        assert!(!g.tool_allowed(&empty, "get_order"), "[] allows no tool");
    }
}
