//! The manifest an agent app reports: validation against the spec's limits
//! and a canonical hash (key order and white space do not count).

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::agents::tools::ToolClass;
use crate::error::Error;
use crate::wire::is_tool_name;

pub const MAX_MANIFEST_BYTES: usize = 512 * 1024;
pub const MAX_TOOLS: usize = 200;
pub const MAX_CONTEXT: usize = 100;
pub const MAX_DESCRIPTION_CHARS: usize = 4000;
pub const MAX_PARAMETERS_BYTES: usize = 32 * 1024;
const MAX_TEXT: usize = 200;
const MAX_GREETING_CHARS: usize = 4000;

#[derive(Debug, Deserialize)]
struct RawManifest {
    app_name: Value,
    app_version: Value,
    sdk: Value,
    tools: Value,
    #[serde(default)]
    greeting: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ManifestTool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub class: ToolClass,
}

impl ManifestTool {
    /// SHA-256 of the parameters schema as canonical JSON (key order and
    /// white space do not count).
    pub fn parameters_hash(&self) -> String {
        let mut canonical = String::new();
        canonical_json(&self.parameters, &mut canonical);
        hex::encode(sha2::Sha256::digest(canonical.as_bytes()))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub app_name: String,
    pub app_version: String,
    pub sdk: String,
    pub tools: Vec<ManifestTool>,
    pub greeting: Option<String>,
    pub context: Vec<(String, Value)>,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::bad_request("manifest_invalid", msg)
}

fn text(v: &Value, field: &str, max: usize) -> Result<String, Error> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() && s.chars().count() <= max => Ok(s.to_string()),
        Some(_) => {
            Err(invalid(format!("'{field}' must be 1 to {max} characters.")).with_param(field))
        }
        None => Err(invalid(format!("'{field}' must be a string.")).with_param(field)),
    }
}

/// Checks that `v` is a JSON Schema object with well-typed core keywords.
fn check_schema(tool: &str, v: &Value) -> Result<(), Error> {
    let Some(obj) = v.as_object() else {
        return Err(invalid(format!(
            "Tool '{tool}': 'parameters' must be a JSON Schema object."
        )));
    };
    let bad = |kw: &str| {
        invalid(format!(
            "Tool '{tool}': 'parameters' is not a valid JSON Schema ('{kw}' has the wrong type)."
        ))
    };
    if let Some(t) = obj.get("type") {
        let ok = t.is_string() || t.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !ok {
            return Err(bad("type"));
        }
    }
    if obj.get("properties").is_some_and(|p| !p.is_object()) {
        return Err(bad("properties"));
    }
    if obj
        .get("required")
        .is_some_and(|r| !r.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
    {
        return Err(bad("required"));
    }
    Ok(())
}

/// Parses and validates a manifest body. Errors use the contract's codes.
pub fn parse(bytes: &[u8]) -> Result<Manifest, Error> {
    let raw: RawManifest = serde_json::from_slice(bytes).map_err(|e| {
        invalid(format!(
            "The manifest is not valid: {e}. It needs app_name, app_version, sdk and tools."
        ))
    })?;
    let tools = raw
        .tools
        .as_array()
        .ok_or_else(|| invalid("'tools' must be an array.").with_param("tools"))?;
    if tools.len() > MAX_TOOLS {
        return Err(Error::bad_request(
            "too_many_tools",
            format!(
                "A manifest may list at most {MAX_TOOLS} tools; this one lists {}.",
                tools.len()
            ),
        )
        .with_param("tools"));
    }
    let context = match &raw.context {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a.clone(),
        Some(_) => {
            return Err(
                invalid("'context' must be an array of {name, value}.").with_param("context")
            )
        }
    };
    if context.len() > MAX_CONTEXT {
        return Err(Error::bad_request(
            "too_many_context_entries",
            format!(
                "A manifest may carry at most {MAX_CONTEXT} context entries; this one has {}.",
                context.len()
            ),
        )
        .with_param("context"));
    }
    let mut seen = HashSet::new();
    let mut out_tools = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        if !is_tool_name(name) {
            return Err(invalid(format!(
                "Tool {i}: 'name' must be 1 to 64 of A-Za-z0-9_-."
            )));
        }
        if !seen.insert(name.to_string()) {
            return Err(invalid(format!(
                "Tool '{name}' is listed twice; tool names must be unique."
            )));
        }
        let description = match t.get("description") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::new(),
            Some(_) => {
                return Err(invalid(format!(
                    "Tool '{name}': 'description' must be a string."
                )))
            }
        };
        if description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(invalid(format!(
                "Tool '{name}': the description has more than {MAX_DESCRIPTION_CHARS} characters."
            )));
        }
        let parameters = t
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        check_schema(name, &parameters)?;
        let size = serde_json::to_vec(&parameters)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_PARAMETERS_BYTES {
            return Err(invalid(format!(
                "Tool '{name}': the parameters take {size} bytes of compact JSON; at most {MAX_PARAMETERS_BYTES} are allowed."
            )));
        }
        let class = t
            .get("class")
            .and_then(Value::as_str)
            .and_then(ToolClass::parse)
            .ok_or_else(|| {
                invalid(format!(
                    "Tool '{name}': 'class' must be read, write or execute."
                ))
            })?;
        out_tools.push(ManifestTool {
            name: name.to_string(),
            description,
            parameters,
            class,
        });
    }
    let mut out_context = Vec::with_capacity(context.len());
    for (i, c) in context.iter().enumerate() {
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty() && n.chars().count() <= MAX_TEXT);
        let Some(name) = name else {
            return Err(invalid(format!(
                "Context entry {i}: 'name' must be 1 to {MAX_TEXT} characters."
            )));
        };
        let value = c.get("value").cloned().unwrap_or(Value::Null);
        out_context.push((name.to_string(), value));
    }
    let greeting = match raw.greeting {
        None | Some(Value::Null) => None,
        Some(g) => Some(text(&g, "greeting", MAX_GREETING_CHARS)?),
    };
    Ok(Manifest {
        app_name: text(&raw.app_name, "app_name", MAX_TEXT)?,
        app_version: text(&raw.app_version, "app_version", MAX_TEXT)?,
        sdk: text(&raw.sdk, "sdk", MAX_TEXT)?,
        tools: out_tools,
        greeting,
        context: out_context,
    })
}

/// Writes `v` with object keys sorted at every level and no white space.
pub fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                canonical_json(&map[*k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

impl Manifest {
    /// The manifest as canonical JSON (only the fields we know).
    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "app_name": self.app_name,
            "app_version": self.app_version,
            "sdk": self.sdk,
            "tools": self.tools.iter().map(|t| serde_json::json!({
                "name": t.name, "description": t.description, "parameters": t.parameters, "class": t.class.as_str(),
            })).collect::<Vec<_>>(),
            "greeting": self.greeting,
            "context": self.context.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect::<Vec<_>>(),
        })
    }

    /// `sha256:<hex>` of the canonical form.
    pub fn hash(&self) -> String {
        let mut s = String::new();
        canonical_json(&self.to_value(), &mut s);
        format!("sha256:{}", hex::encode(Sha256::digest(s.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"app_name": "app", "app_version": "1.0", "sdk": "sdk-js/2", "tools": [
            {"name": "read_file", "description": "Reads", "parameters": {"type": "object", "properties": {"p": {"type": "string"}}}, "class": "read"}
        ]})
    }

    fn code(v: &Value) -> String {
        parse(&serde_json::to_vec(v).unwrap())
            .err()
            .map(|e| e.code.to_string())
            .unwrap_or_else(|| "ok".into())
    }

    #[test]
    fn key_order_and_white_space_do_not_change_the_hash() {
        let a = parse(br#"{"app_name":"app","app_version":"1.0","sdk":"s","tools":[{"name":"t","class":"read","description":"d","parameters":{"b":1,"a":2}}]}"#).unwrap();
        let b = parse(b"{ \"tools\" : [ {\"parameters\": {\"a\":2, \"b\":1}, \"description\":\"d\", \"class\":\"read\", \"name\":\"t\"} ],\n \"sdk\":\"s\", \"app_version\":\"1.0\", \"app_name\":\"app\" }").unwrap();
        assert_eq!(a.hash(), b.hash());
        let c = parse(br#"{"app_name":"app","app_version":"1.1","sdk":"s","tools":[{"name":"t","class":"read","description":"d","parameters":{"b":1,"a":2}}]}"#).unwrap();
        assert_ne!(a.hash(), c.hash());
        assert!(a.hash().starts_with("sha256:"));
    }

    #[test]
    fn tool_count_limit_is_200() {
        let mut v = base();
        let tool = |i: usize| json!({"name": format!("t{i}"), "description": "", "parameters": {}, "class": "read"});
        v["tools"] = Value::Array((0..200).map(tool).collect());
        assert_eq!(code(&v), "ok");
        v["tools"] = Value::Array((0..201).map(tool).collect());
        assert_eq!(code(&v), "too_many_tools");
    }

    #[test]
    fn context_limit_is_100() {
        let mut v = base();
        v["context"] = Value::Array(
            (0..100)
                .map(|i| json!({"name": format!("c{i}"), "value": "x"}))
                .collect(),
        );
        assert_eq!(code(&v), "ok");
        v["context"] = Value::Array(
            (0..101)
                .map(|i| json!({"name": format!("c{i}"), "value": "x"}))
                .collect(),
        );
        assert_eq!(code(&v), "too_many_context_entries");
    }

    #[test]
    fn description_limit_is_4000_characters_and_the_error_names_the_tool() {
        let mut v = base();
        v["tools"][0]["description"] = json!("é".repeat(4000));
        assert_eq!(code(&v), "ok");
        v["tools"][0]["description"] = json!("é".repeat(4001));
        let err = parse(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(err.code, "manifest_invalid");
        assert!(err.message.contains("read_file"));
    }

    #[test]
    fn parameters_limit_is_32768_bytes_of_compact_json() {
        let mut v = base();
        let overhead = serde_json::to_vec(&json!({"description": ""}))
            .unwrap()
            .len();
        v["tools"][0]["parameters"] = json!({"description": "a".repeat(32768 - overhead)});
        assert_eq!(
            serde_json::to_vec(&v["tools"][0]["parameters"])
                .unwrap()
                .len(),
            32768
        );
        assert_eq!(code(&v), "ok");
        v["tools"][0]["parameters"] = json!({"description": "a".repeat(32769 - overhead)});
        assert_eq!(code(&v), "manifest_invalid");
    }

    #[test]
    fn malformed_manifests_are_manifest_invalid() {
        let mut v = base();
        v["tools"][0]["class"] = json!("admin");
        assert_eq!(code(&v), "manifest_invalid");
        let mut v = base();
        v["tools"][0]["parameters"] = json!("not a schema");
        assert_eq!(code(&v), "manifest_invalid");
        let mut v = base();
        v["tools"] = json!([v["tools"][0].clone(), v["tools"][0].clone()]);
        assert_eq!(code(&v), "manifest_invalid");
        let mut v = base();
        v.as_object_mut().unwrap().remove("sdk");
        assert_eq!(code(&v), "manifest_invalid");
        let mut v = base();
        v["tools"][0]["name"] = json!("bad name");
        assert_eq!(code(&v), "manifest_invalid");
        assert_eq!(parse(b"{nope").unwrap_err().code, "manifest_invalid");
    }
}
