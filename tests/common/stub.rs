//! Scripts for the stub upstream (`crates/stub-upstream`).

use gatehouse_stub_upstream::{Script, ScriptToolCall};

/// One tool call the stub answers with.
pub fn tool_call(id: &str, name: &str, arguments: &str) -> ScriptToolCall {
    ScriptToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// A script whose answer is these tool calls.
pub fn calling(calls: Vec<ScriptToolCall>) -> Script {
    Script {
        tool_calls: calls,
        ..Script::default()
    }
}
