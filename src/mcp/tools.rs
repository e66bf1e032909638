//! MCP tools as the gateway shows them (contract: "MCP gateway" → "Tool
//! names, classes, listing"): the exposed name of an upstream tool, the split
//! of an incoming name, the class of a tool and where it came from, and the
//! listed form of a tool (the upstream's fields as received, `_meta` merged).
//!
//! Plain functions of plain data; the listing and the calls are in
//! `gateway.rs`, the upstream protocol in `upstream.rs`.

use std::collections::BTreeMap;

use rmcp::model::ToolAnnotations;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use crate::agents::tools::ToolClass;

/// The longest exposed name (MCP clients and model APIs cap tool names at 64).
pub const MAX_NAME: usize = 64;

/// Whether `s` is an acceptable tool name as it is: `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The name a client sees for the upstream tool `tool` of `server`: on
/// `/mcp` (`server` given) `{server}__{tool}`, on `/mcp/{server}` (`None`)
/// the tool's own name; when that is not a plain name, the sanitised,
/// shortened name with the first 8 hex digits of SHA-256 of the upstream
/// name, so two upstream names never meet in one exposed name.
pub fn exposed_name(server: Option<&str>, tool: &str) -> String {
    let prefix = server.map(|s| format!("{s}__")).unwrap_or_default();
    let whole = format!("{prefix}{tool}");
    if is_plain_name(&whole) {
        return whole;
    }
    let hash = hex::encode(Sha256::digest(tool.as_bytes()));
    // 64 - len(server) - 11 on /mcp (`__`, `_` and 8 hex digits), 55 on /mcp/{server}.
    let room = MAX_NAME.saturating_sub(prefix.len() + 9);
    let p: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(room)
        .collect();
    format!("{prefix}{p}_{}", &hash[..8])
}

/// An incoming name on `/mcp` split at its first `__` into server and
/// exposed tool part; `None` when it has no `__` (no server's tool).
/// Server names have no `_`, so the first `__` ends the server's name.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    name.split_once("__").filter(|(s, _)| !s.is_empty())
}

/// Where a tool's class came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSource {
    Config,
    Annotations,
    Default,
}

impl ClassSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ClassSource::Config => "config",
            ClassSource::Annotations => "annotations",
            ClassSource::Default => "default",
        }
    }
}

/// The class of upstream tool `tool`: the server's `tool_classes` entry;
/// else `read` when `readOnlyHint` is true; else `write` when
/// `destructiveHint` is false; else `execute` (MCP's default for a tool
/// without hints is "destructive").
pub fn classify(
    tool_classes: &BTreeMap<String, ToolClass>,
    tool: &str,
    annotations: Option<&ToolAnnotations>,
) -> (ToolClass, ClassSource) {
    if let Some(c) = tool_classes.get(tool) {
        return (*c, ClassSource::Config);
    }
    let read_only = annotations.and_then(|a| a.read_only_hint);
    let destructive = annotations.and_then(|a| a.destructive_hint);
    let class = if read_only == Some(true) {
        ToolClass::Read
    } else if destructive == Some(false) {
        ToolClass::Write
    } else {
        ToolClass::Execute
    };
    let source = if read_only == Some(true) || destructive.is_some() {
        ClassSource::Annotations
    } else {
        ClassSource::Default
    };
    (class, source)
}

/// One tool as an upstream listed it: the name and annotations read with
/// rmcp's types, and the whole object as received (to pass on unchanged).
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamTool {
    pub name: String,
    pub annotations: Option<ToolAnnotations>,
    pub raw: Map<String, Value>,
}

impl UpstreamTool {
    /// Reads one entry of a `tools/list` answer; `None` when it is not an
    /// object with a string `name` (such an entry is left out).
    pub fn from_value(v: Value) -> Option<UpstreamTool> {
        let Value::Object(raw) = v else {
            return None;
        };
        let name = raw.get("name")?.as_str()?.to_string();
        // Annotations that rmcp cannot read count as none (the default class).
        let annotations = raw
            .get("annotations")
            .and_then(|a| serde_json::from_value::<ToolAnnotations>(a.clone()).ok());
        Some(UpstreamTool {
            name,
            annotations,
            raw,
        })
    }

    pub fn description(&self) -> Option<&str> {
        self.raw.get("description").and_then(Value::as_str)
    }
}

/// The fields of an upstream tool that are passed on as received.
const PASSED: [&str; 5] = [
    "description",
    "inputSchema",
    "outputSchema",
    "title",
    "annotations",
];

/// A tool as listed to the client: `exposed` as its name, the upstream's
/// `description`, `inputSchema`, `outputSchema`, `title` and `annotations`
/// as received, and its `_meta` with the gateway's three keys merged in.
pub fn listed_tool(server: &str, exposed: &str, class: ToolClass, tool: &UpstreamTool) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), Value::String(exposed.to_string()));
    for k in PASSED {
        if let Some(v) = tool.raw.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    // A tool without an input schema is not valid MCP; clients need one.
    out.entry("inputSchema")
        .or_insert_with(|| serde_json::json!({"type": "object"}));
    let mut meta = match tool.raw.get("_meta") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    meta.insert("gatehouse/server".into(), Value::String(server.to_string()));
    meta.insert("gatehouse/tool".into(), Value::String(tool.name.clone()));
    meta.insert(
        "gatehouse/class".into(),
        Value::String(class.as_str().to_string()),
    );
    out.insert("_meta".into(), Value::Object(meta));
    Value::Object(out)
}

/// The upstream tool of `server` a client's name stands for: the one whose
/// exposed name (under the route's rule) is `exposed`. Linear: a server's
/// list is short, and a hashed name cannot be reversed.
pub fn find_exposed<'a>(
    route_server: Option<&str>,
    exposed: &str,
    tools: &'a [UpstreamTool],
) -> Option<&'a UpstreamTool> {
    tools
        .iter()
        .find(|t| exposed_name(route_server, &t.name) == exposed)
}

/// SHA-256 of `arguments` in RFC 8785 canonical form, as `sha256:<hex>`.
pub fn arguments_sha256(arguments: &Value) -> String {
    let canonical = canonical_json(arguments);
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    )
}

/// `v` in RFC 8785 (JSON Canonicalization Scheme) form: keys sorted, no
/// white space, numbers as ECMAScript writes them.
pub fn canonical_json(v: &Value) -> String {
    // serde_jcs fails only on values serde_json cannot hold either.
    serde_jcs::to_string(v).unwrap_or_else(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plain_name_is_server_and_tool_joined() {
        assert_eq!(exposed_name(Some("alpha"), "add"), "alpha__add");
        assert_eq!(exposed_name(None, "add"), "add");
        assert_eq!(exposed_name(None, "get-item_2"), "get-item_2");
    }

    #[test]
    fn a_name_with_other_characters_is_sanitised_and_hashed() {
        let h = &hex::encode(Sha256::digest("read.file".as_bytes()))[..8];
        assert_eq!(
            exposed_name(Some("alpha"), "read.file"),
            format!("alpha__read_file_{h}")
        );
        assert_eq!(exposed_name(None, "read.file"), format!("read_file_{h}"));
        // Non-ASCII characters become one `_` each.
        let h = &hex::encode(Sha256::digest("größe".as_bytes()))[..8];
        assert_eq!(exposed_name(None, "größe"), format!("gr__e_{h}"));
    }

    #[test]
    fn names_at_64_pass_and_at_65_are_cut_and_hashed() {
        let server = "alpha";
        let at = "t".repeat(64 - server.len() - 2);
        assert_eq!(exposed_name(Some(server), &at).len(), 64);
        assert_eq!(exposed_name(Some(server), &at), format!("alpha__{at}"));
        let past = "t".repeat(64 - server.len() - 1);
        let e = exposed_name(Some(server), &past);
        assert_eq!(e.len(), 64);
        // p is cut to 64 - len(server) - 11.
        let p_len = 64 - server.len() - 11;
        assert!(e.starts_with(&format!("alpha__{}_", "t".repeat(p_len))));
        assert!(is_plain_name(&e));
        // On /mcp/{server}: 64 passes, 65 is cut to 55 + `_` + 8.
        assert_eq!(exposed_name(None, &"x".repeat(64)), "x".repeat(64));
        let e = exposed_name(None, &"x".repeat(65));
        assert_eq!(e.len(), 64);
        assert!(e.starts_with(&format!("{}_", "x".repeat(55))));
    }

    #[test]
    fn an_empty_upstream_name_is_hashed_too() {
        let e = exposed_name(None, "");
        assert_eq!(e.len(), 9);
        assert!(e.starts_with('_'));
    }

    #[test]
    fn an_incoming_name_splits_at_its_first_double_underscore() {
        assert_eq!(split_name("alpha__add"), Some(("alpha", "add")));
        assert_eq!(split_name("alpha__a__b"), Some(("alpha", "a__b")));
        assert_eq!(split_name("add"), None);
        assert_eq!(split_name("__add"), None);
    }

    fn ann(v: Value) -> ToolAnnotations {
        serde_json::from_value(v).expect("annotations")
    }

    #[test]
    fn class_comes_from_config_then_hints_then_default() {
        let mut cfg = BTreeMap::new();
        cfg.insert("note".to_string(), ToolClass::Write);
        let ro = ann(json!({"readOnlyHint": true}));
        assert_eq!(
            classify(&cfg, "note", Some(&ro)),
            (ToolClass::Write, ClassSource::Config)
        );
        assert_eq!(
            classify(&cfg, "get", Some(&ro)),
            (ToolClass::Read, ClassSource::Annotations)
        );
        let nd = ann(json!({"destructiveHint": false}));
        assert_eq!(
            classify(&cfg, "put", Some(&nd)),
            (ToolClass::Write, ClassSource::Annotations)
        );
        let d = ann(json!({"destructiveHint": true}));
        assert_eq!(
            classify(&cfg, "rm", Some(&d)),
            (ToolClass::Execute, ClassSource::Annotations)
        );
        let ro_false = ann(json!({"readOnlyHint": false}));
        assert_eq!(
            classify(&cfg, "x", Some(&ro_false)),
            (ToolClass::Execute, ClassSource::Default)
        );
        assert_eq!(
            classify(&cfg, "x", None),
            (ToolClass::Execute, ClassSource::Default)
        );
    }

    #[test]
    fn a_listed_tool_keeps_the_upstream_fields_and_merges_meta() {
        let t = UpstreamTool::from_value(json!({
            "name": "add", "title": "Add", "description": "Adds.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
            "outputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true, "x-custom": 1},
            "_meta": {"vendor/k": "v"},
            "icons": []
        }))
        .expect("a tool");
        let listed = listed_tool("alpha", "alpha__add", ToolClass::Read, &t);
        assert_eq!(
            listed,
            json!({
                "name": "alpha__add", "title": "Add", "description": "Adds.",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
                "outputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true, "x-custom": 1},
                "_meta": {"vendor/k": "v", "gatehouse/server": "alpha",
                          "gatehouse/tool": "add", "gatehouse/class": "read"}
            })
        );
    }

    #[test]
    fn an_entry_without_a_name_is_not_a_tool() {
        assert!(UpstreamTool::from_value(json!({"title": "x"})).is_none());
        assert!(UpstreamTool::from_value(json!("add")).is_none());
    }

    #[test]
    fn the_exposed_name_finds_its_upstream_tool() {
        let tools: Vec<UpstreamTool> = ["add", "read.file"]
            .iter()
            .filter_map(|n| UpstreamTool::from_value(json!({"name": n})))
            .collect();
        let e = exposed_name(None, "read.file");
        assert_eq!(
            find_exposed(None, &e, &tools).map(|t| t.name.as_str()),
            Some("read.file")
        );
        assert!(find_exposed(None, "read.file", &tools).is_none());
        assert_eq!(
            find_exposed(Some("alpha"), "alpha__add", &tools).map(|t| t.name.as_str()),
            Some("add")
        );
    }

    #[test]
    fn arguments_hash_over_rfc_8785_canonical_form() {
        let a = json!({"b": 1.0, "a": [1e21, "x"], "c": {"z": null, "y": true}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":[1e+21,"x"],"b":1,"c":{"y":true,"z":null}}"#
        );
        let same = json!({"c": {"y": true, "z": null}, "a": [1e21, "x"], "b": 1});
        assert_eq!(arguments_sha256(&a), arguments_sha256(&same));
        assert!(arguments_sha256(&a).starts_with("sha256:"));
        assert_eq!(arguments_sha256(&a).len(), 7 + 64);
    }

    #[test]
    fn canonical_json_follows_rfc_8785() {
        let v: Value = serde_json::from_str(
            r#"{ "b": [1.0, 2.5e0, 1e21, -0], "a": {"z": "é\n", "y": null}, "€": 1, "\u0080": 2 }"#,
        )
        .unwrap();
        // Keys by UTF-16 code units, ECMAScript numbers, no white space.
        assert_eq!(
            canonical_json(&v),
            "{\"a\":{\"y\":null,\"z\":\"é\\n\"},\"b\":[1,2.5,1e+21,0],\"\u{80}\":2,\"€\":1}"
        );
        assert_eq!(
            arguments_sha256(&serde_json::json!({})),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
