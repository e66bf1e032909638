//! The agent turn's edits on a Responses body ([`TurnBody`]): the rules are
//! the turn's (`crate::agents::turn`), exactly as for agent chat; here is
//! only how each edit reads in the Responses shape.

use crate::agents::turn::{Offered, TurnBody};
use crate::error::Error;
use crate::wire::responses::request::is_passed_tool;
use crate::wire::responses::ResponsesRequest;
use crate::wire::{is_tool_name, MAX_TOOL_NAME_LEN};

/// The most tools an agent request may offer.
pub const MAX_TOOLS: usize = 128;

/// The names of the function and custom tools a Responses body offers.
#[derive(Debug)]
pub struct ResponsesTools(Vec<String>);

impl Offered for ResponsesTools {
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

impl TurnBody for ResponsesRequest {
    type Offered = ResponsesTools;

    /// At most 128 tools, each named by the tool-name rule (built-in tools
    /// were removed before: the agent route never passes them on).
    fn check(&self) -> Result<ResponsesTools, Error> {
        let tools: Vec<&serde_json::Value> = self
            .body
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .map(|ts| ts.iter().filter(|t| is_passed_tool(t)).collect())
            .unwrap_or_default();
        if tools.len() > MAX_TOOLS {
            return Err(Error::bad_request(
                "too_many_tools",
                format!(
                    "At most {MAX_TOOLS} tools may be offered; this request offers {}.",
                    tools.len()
                ),
            )
            .with_param("tools"));
        }
        let mut names = Vec::with_capacity(tools.len());
        for t in tools {
            let name = t
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("");
            if !is_tool_name(name) {
                return Err(Error::validation(
                    "tools",
                    format!("A tool's name must be 1 to {MAX_TOOL_NAME_LEN} of A-Za-z0-9_-."),
                ));
            }
            names.push(name.to_string());
        }
        Ok(ResponsesTools(names))
    }

    fn keep_tools(&mut self, keep: &[&str]) {
        ResponsesRequest::keep_tools(self, keep)
    }

    fn answered_calls(&self) -> Vec<String> {
        ResponsesRequest::answered_calls(self)
    }

    fn answer_calls(
        &mut self,
        fate: &dyn Fn(&str) -> Result<Option<&'static str>, Error>,
    ) -> Result<(), Error> {
        ResponsesRequest::answer_calls(self, fate)
    }

    fn put_instructions(&mut self, instructions: &str) {
        self.set_agent_instructions(instructions)
    }

    fn protect(&mut self, scan: &mut dyn FnMut(&mut String)) -> Result<(), Error> {
        ResponsesRequest::protect(self, scan);
        Ok(())
    }

    /// The note goes after the instructions (the only place the turn puts one).
    fn put_note(&mut self, note: &str, _at: usize) -> Result<(), Error> {
        self.push_note(note);
        Ok(())
    }

    fn is_stream(&self) -> bool {
        ResponsesRequest::is_stream(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(tools: serde_json::Value) -> ResponsesRequest {
        ResponsesRequest::new(
            json!({"input": "x", "tools": tools})
                .as_object()
                .unwrap()
                .clone(),
        )
    }

    #[test]
    fn tools_are_counted_to_128_and_named_by_the_rule() {
        let tools = |n: usize| {
            (0..n)
                .map(|i| json!({"type": "function", "name": format!("t{i}")}))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            request(json!(tools(128))).check().unwrap().names().len(),
            128
        );
        let e = request(json!(tools(129))).check().unwrap_err();
        assert_eq!(
            (e.code.as_ref(), e.param.as_deref()),
            ("too_many_tools", Some("tools"))
        );
        let e = request(json!([{"type": "custom", "name": "a.b"}]))
            .check()
            .unwrap_err();
        assert_eq!(
            (e.code.as_ref(), e.param.as_deref()),
            ("validation_error", Some("tools"))
        );
        let e = request(json!([{"type": "function", "name": "x".repeat(65)}]))
            .check()
            .unwrap_err();
        assert_eq!(e.code.as_ref(), "validation_error");
    }
}
