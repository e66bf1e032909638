//! Tool rules of agent chat: which offered tools reach the upstream, given
//! the session's tool mode, each tool's class, the agent's tool contract and
//! the administrator's decisions.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::agents::agent::ToolName;
use crate::error::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolClass {
    Read,
    Write,
    Execute,
}

impl ToolClass {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            "execute" => Some(Self::Execute),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Execute => "execute",
        }
    }
}

pub use crate::agents::agent::ToolMode;

/// An administrator's view of a tool of an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStatus {
    Contract,
    Accepted,
    Held,
    Rejected,
}

impl ToolStatus {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "contract" => Some(Self::Contract),
            "accepted" => Some(Self::Accepted),
            "held" => Some(Self::Held),
            "rejected" => Some(Self::Rejected),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Contract => "contract",
            Self::Accepted => "accepted",
            Self::Held => "held",
            Self::Rejected => "rejected",
        }
    }
}

/// Everything the decision needs, as plain data.
pub struct ToolPolicy<'a> {
    pub mode: ToolMode,
    /// Classes from the device's latest manifest; a missing tool counts as `execute`.
    pub classes: &'a HashMap<String, ToolClass>,
    pub contract: &'a [String],
    /// Administrator decisions (accepted / rejected) by tool name.
    pub decisions: &'a HashMap<String, ToolStatus>,
    pub allow_local_mcp: bool,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ToolDecision {
    /// Tools that go upstream, in offered order.
    pub keep: Vec<String>,
    /// Tools held back by the contract, in offered order (for `X-Service-Held-Tools`).
    pub held: Vec<String>,
}

impl ToolPolicy<'_> {
    pub fn class_of(&self, name: &str) -> ToolClass {
        self.classes
            .get(name)
            .copied()
            .unwrap_or(ToolClass::Execute)
    }

    /// Whether a tool outside the contract is held.
    pub fn is_held(&self, name: &str) -> bool {
        let contract: HashSet<&str> = self.contract.iter().map(String::as_str).collect();
        self.is_held_in(&contract, name)
    }

    fn is_held_in(&self, contract: &HashSet<&str>, name: &str) -> bool {
        if self.allow_local_mcp || contract.is_empty() || contract.contains(name) {
            return false;
        }
        self.decisions.get(name) != Some(&ToolStatus::Accepted)
    }

    pub fn decide(&self, offered: &[String]) -> ToolDecision {
        let mut d = ToolDecision::default();
        let contract: HashSet<&str> = self.contract.iter().map(String::as_str).collect();
        let mut held_seen = HashSet::new();
        for name in offered {
            if self.is_held_in(&contract, name) {
                if held_seen.insert(name.as_str()) {
                    d.held.push(name.clone());
                }
                continue;
            }
            let allowed = match self.mode {
                ToolMode::Off => false,
                ToolMode::ReadOnly => self.class_of(name) == ToolClass::Read,
                ToolMode::Ask | ToolMode::Auto => true,
            };
            if allowed {
                d.keep.push(name.clone());
            }
        }
        d
    }

    /// Whether a call of this tool needs the user's approval.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.mode == ToolMode::Ask && self.class_of(name) != ToolClass::Read
    }
}

/// At most this many `tools` in one agent chat request.
pub const MAX_REQUEST_TOOLS: usize = 128;

/// The function names of the `tools` a chat body offers, in order, checked
/// before anything else happens: at most [`MAX_REQUEST_TOOLS`] (400
/// `too_many_tools`), each named by the tool-name rule (400 `validation_error`),
/// so a refused list records nothing and costs nothing.
pub fn offered_tools(body: &Map<String, Value>) -> Result<Vec<String>, Error> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(Error::validation("tools", "'tools' must be a list.")),
    };
    if tools.len() > MAX_REQUEST_TOOLS {
        return Err(Error::bad_request(
            "too_many_tools",
            format!(
                "A request may offer at most {MAX_REQUEST_TOOLS} tools; it offered {}.",
                tools.len()
            ),
        )
        .with_param("tools"));
    }
    tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .and_then(ToolName::parse)
                .map(|n| n.as_str().to_string())
                .ok_or_else(|| {
                    Error::validation(
                        "tools",
                        format!(
                            "tools[{i}].function.name must be 1 to 64 of letters, digits, _ and -."
                        ),
                    )
                })
        })
        .collect()
}

/// Refuses the legacy `functions` / `function_call` fields and `function`
/// messages: they would bypass tool modes, holding and approvals.
pub fn refuse_legacy_functions(body: &Map<String, Value>) -> Result<(), Error> {
    const ADVICE: &str = "use tools and tool_choice";
    for field in ["functions", "function_call"] {
        if body.contains_key(field) {
            return Err(Error::validation(
                field,
                format!("'{field}' is not accepted on agent chat: {ADVICE}."),
            ));
        }
    }
    let function_message = body
        .get("messages")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter()
                .any(|m| m.get("role").and_then(Value::as_str) == Some("function"))
        });
    if function_message {
        return Err(Error::validation(
            "messages",
            format!("Messages with role 'function' are not accepted on agent chat: {ADVICE}."),
        ));
    }
    Ok(())
}

/// Removes every tool not in `keep` from the body; drops `tool_choice` when it
/// names a removed tool (or requires a tool when none is left), and `tools`
/// itself when nothing is left.
pub fn apply(body: &mut Map<String, Value>, keep: &[String]) {
    let keep: HashSet<&str> = keep.iter().map(String::as_str).collect();
    let kept = |v: &Value| {
        v.get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| keep.contains(n))
    };
    let mut now_empty = false;
    if let Some(Value::Array(tools)) = body.get_mut("tools") {
        tools.retain(kept);
        now_empty = tools.is_empty();
    }
    if now_empty {
        body.remove("tools");
        body.remove("parallel_tool_calls");
    }
    let drop_choice = match body.get("tool_choice") {
        Some(Value::Object(_)) => {
            let name = body["tool_choice"]
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            name.is_some_and(|n| !keep.contains(n))
        }
        Some(Value::String(s)) => now_empty && (s == "required" || s == "auto"),
        _ => false,
    };
    if drop_choice || (now_empty && body.contains_key("tool_choice")) {
        body.remove("tool_choice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn tools(n: usize) -> Value {
        Value::Array(
            (0..n)
                .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("t{i}")}}))
                .collect(),
        )
    }

    #[test]
    fn a_request_may_offer_up_to_128_tools_and_no_more() {
        let at = offered_tools(&body(serde_json::json!({"tools": tools(128)}))).unwrap();
        assert_eq!(at.len(), 128);
        let over = offered_tools(&body(serde_json::json!({"tools": tools(129)}))).unwrap_err();
        assert_eq!(
            (over.code.as_ref(), over.param.as_deref()),
            ("too_many_tools", Some("tools"))
        );
        assert_eq!(over.status(), 400);
    }

    #[test]
    fn tool_names_follow_the_name_rule() {
        for bad in ["", "has space", "<script>", &"x".repeat(65)] {
            let b = body(
                serde_json::json!({"tools": [{"type": "function", "function": {"name": bad}}]}),
            );
            let e = offered_tools(&b).unwrap_err();
            assert_eq!(
                (e.code.as_ref(), e.param.as_deref()),
                ("validation_error", Some("tools")),
                "{bad}"
            );
        }
        let nameless = body(serde_json::json!({"tools": [{"type": "function"}]}));
        assert!(offered_tools(&nameless).is_err());
        let ok = body(
            serde_json::json!({"tools": [{"type": "function", "function": {"name": "get_weather-2"}}]}),
        );
        assert_eq!(
            offered_tools(&ok).unwrap(),
            vec!["get_weather-2".to_string()]
        );
    }

    #[test]
    fn legacy_function_fields_and_messages_are_refused() {
        let e = refuse_legacy_functions(&body(serde_json::json!({"functions": []}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("functions"));
        assert!(e.message.contains("use tools and tool_choice"));
        let e = refuse_legacy_functions(&body(serde_json::json!({"function_call": "auto"})))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("function_call"));
        let e = refuse_legacy_functions(&body(
            serde_json::json!({"messages": [{"role": "function", "name": "f", "content": "x"}]}),
        ))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(refuse_legacy_functions(&body(
            serde_json::json!({"messages": [{"role": "user", "content": "x"}]})
        ))
        .is_ok());
    }
    use serde_json::json;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn classes() -> HashMap<String, ToolClass> {
        [
            ("read_file", ToolClass::Read),
            ("write_file", ToolClass::Write),
            ("run", ToolClass::Execute),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    #[test]
    fn each_mode_keeps_the_right_tools() {
        let classes = classes();
        let decisions = HashMap::new();
        let offered = names(&["read_file", "write_file", "run", "unknown"]);
        let keep = |mode| {
            ToolPolicy {
                mode,
                classes: &classes,
                contract: &[],
                decisions: &decisions,
                allow_local_mcp: false,
            }
            .decide(&offered)
            .keep
        };
        assert_eq!(keep(ToolMode::Off), Vec::<String>::new());
        assert_eq!(keep(ToolMode::ReadOnly), names(&["read_file"]));
        assert_eq!(keep(ToolMode::Ask), offered);
        assert_eq!(keep(ToolMode::Auto), offered);
    }

    #[test]
    fn unknown_tools_count_as_execute() {
        let classes = classes();
        let d = HashMap::new();
        let p = ToolPolicy {
            mode: ToolMode::Ask,
            classes: &classes,
            contract: &[],
            decisions: &d,
            allow_local_mcp: false,
        };
        assert_eq!(p.class_of("mystery"), ToolClass::Execute);
        assert!(p.needs_approval("mystery"));
        assert!(p.needs_approval("write_file"));
        assert!(!p.needs_approval("read_file"));
    }

    #[test]
    fn tools_outside_a_contract_are_held_unless_accepted_or_local_mcp() {
        let classes = classes();
        let contract = names(&["read_file"]);
        let mut decisions = HashMap::new();
        decisions.insert("run".to_string(), ToolStatus::Rejected);
        let offered = names(&["read_file", "write_file", "run"]);
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: false,
        };
        let d = p.decide(&offered);
        assert_eq!(d.keep, names(&["read_file"]));
        assert_eq!(d.held, names(&["write_file", "run"]));
        decisions.insert("write_file".to_string(), ToolStatus::Accepted);
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: false,
        };
        assert_eq!(p.decide(&offered).held, names(&["run"]));
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &contract,
            decisions: &decisions,
            allow_local_mcp: true,
        };
        assert_eq!(
            p.decide(&offered),
            ToolDecision {
                keep: offered.clone(),
                held: vec![]
            }
        );
    }

    #[test]
    fn empty_contract_holds_nothing() {
        let classes = classes();
        let d = HashMap::new();
        let p = ToolPolicy {
            mode: ToolMode::Auto,
            classes: &classes,
            contract: &[],
            decisions: &d,
            allow_local_mcp: false,
        };
        assert!(p.decide(&names(&["x", "y"])).held.is_empty());
    }

    #[test]
    fn apply_removes_tools_and_a_tool_choice_naming_a_removed_tool() {
        let mut body = json!({"tools": [
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}}
        ], "tool_choice": {"type": "function", "function": {"name": "b"}}})
        .as_object()
        .unwrap()
        .clone();
        apply(&mut body, &names(&["a"]));
        assert_eq!(body["tools"].as_array().unwrap().len(), 1);
        assert!(!body.contains_key("tool_choice"));
        let mut body = json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "required", "parallel_tool_calls": true})
            .as_object().unwrap().clone();
        apply(&mut body, &[]);
        assert!(
            !body.contains_key("tools")
                && !body.contains_key("tool_choice")
                && !body.contains_key("parallel_tool_calls")
        );
        let mut body = json!({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "a"}}})
            .as_object().unwrap().clone();
        apply(&mut body, &names(&["a"]));
        assert!(body.contains_key("tool_choice"));
    }
}
