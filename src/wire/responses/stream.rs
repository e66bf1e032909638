//! A chat stream made into the Responses event grammar (contract, "Streams"):
//! every event has `type` and `sequence_number` (0, 1, ...); the response is
//! created and in progress first; items are added, filled and done one at a
//! time, numbered in the order they start; exactly one terminal event
//! (`response.completed`, `response.incomplete` or `response.failed`) ends
//! the stream, and nothing follows it.

use serde_json::{json, Value};

use crate::usage::{estimate_tokens, Tokens};
use crate::wire::responses::answer::{
    call_item, custom_input, message_item, response_object, status_of, usage_of, Echo, ResponseMeta,
};
use crate::wire::responses::new_id;
use crate::wire::sse::SseFrame;

/// The item being streamed.
enum Open {
    Message {
        id: String,
        text: String,
    },
    /// A function call, announced as it streams.
    Call {
        id: String,
        call: Call,
    },
    /// A custom tool call, buffered until it is whole (it goes out as one
    /// input delta).
    Custom(Call),
}

struct Call {
    upstream_index: u64,
    call_id: String,
    name: String,
    arguments: String,
}

/// One stream's translation; see the module documentation.
pub struct ResponsesStream {
    meta: ResponseMeta,
    echo: Echo,
    seq: u64,
    started: bool,
    ended: bool,
    /// The items done, in order.
    output: Vec<Value>,
    open: Option<Open>,
    finish_reason: Option<String>,
    completion_chars: usize,
}

impl ResponsesStream {
    pub fn new(meta: ResponseMeta, echo: Echo) -> ResponsesStream {
        ResponsesStream {
            meta,
            echo,
            seq: 0,
            started: false,
            ended: false,
            output: Vec::new(),
            open: None,
            finish_reason: None,
            completion_chars: 0,
        }
    }

    pub fn is_ended(&self) -> bool {
        self.ended
    }

    fn event(&mut self, kind: &str, mut fields: Value) -> SseFrame {
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.seq);
        self.seq += 1;
        SseFrame::Event {
            event: kind.to_string(),
            data: fields.to_string(),
        }
    }

    fn start(&mut self, out: &mut Vec<SseFrame>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = response_object(
            &self.meta,
            &self.echo,
            "in_progress",
            vec![],
            Value::Null,
            Value::Null,
            Value::Null,
        );
        out.push(self.event("response.created", json!({ "response": r })));
        out.push(self.event("response.in_progress", json!({ "response": r })));
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Ends the open item with its `.done` events.
    fn close(&mut self, out: &mut Vec<SseFrame>) {
        let idx = self.index();
        match self.open.take() {
            None => {}
            Some(Open::Message { id, text }) => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": idx, "content_index": 0, "text": text}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": idx, "content_index": 0, "part": part}),
                ));
                let item = message_item(&id, &text, "completed");
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": idx, "item": item}),
                ));
                self.output.push(item);
            }
            Some(Open::Call { id, call }) => {
                out.push(self.event("response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": idx, "name": call.name, "arguments": call.arguments})));
                let item = call_item(
                    &self.echo,
                    Some(&id),
                    &call.call_id,
                    &call.name,
                    &call.arguments,
                );
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": idx, "item": item}),
                ));
                self.output.push(item);
            }
            Some(Open::Custom(call)) => {
                let id = new_id("ctc_");
                let input = custom_input(&call.arguments);
                let added = json!({"type": "custom_tool_call", "id": id, "call_id": call.call_id,
                                   "name": call.name, "input": "", "status": "in_progress"});
                out.push(self.event(
                    "response.output_item.added",
                    json!({"output_index": idx, "item": added}),
                ));
                out.push(self.event(
                    "response.custom_tool_call_input.delta",
                    json!({"item_id": id, "output_index": idx, "delta": input}),
                ));
                out.push(self.event(
                    "response.custom_tool_call_input.done",
                    json!({"item_id": id, "output_index": idx, "input": input}),
                ));
                let item = call_item(
                    &self.echo,
                    Some(&id),
                    &call.call_id,
                    &call.name,
                    &call.arguments,
                );
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": idx, "item": item}),
                ));
                self.output.push(item);
            }
        }
    }

    fn text(&mut self, piece: &str, out: &mut Vec<SseFrame>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close(out);
            let id = new_id("msg_");
            let idx = self.index();
            let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
            out.push(self.event(
                "response.output_item.added",
                json!({"output_index": idx, "item": item}),
            ));
            out.push(self.event("response.content_part.added", json!({"item_id": id, "output_index": idx,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
            self.open = Some(Open::Message {
                id,
                text: String::new(),
            });
        }
        let idx = self.index();
        let Some(Open::Message { id, text }) = self.open.as_mut() else {
            return;
        };
        text.push_str(piece);
        let id = id.clone();
        out.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": idx, "content_index": 0, "delta": piece}),
        ));
    }

    fn tool_delta(&mut self, tc: &Value, out: &mut Vec<SseFrame>) {
        let upstream_index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
        let name = tc
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let args = tc
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("");
        let same = match &self.open {
            Some(Open::Call { call, .. } | Open::Custom(call)) => {
                call.upstream_index == upstream_index
            }
            _ => false,
        };
        if !same {
            self.close(out);
            let call = Call {
                upstream_index,
                call_id: tc
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: name.to_string(),
                arguments: String::new(),
            };
            if self.echo.is_custom(name) {
                self.open = Some(Open::Custom(call));
            } else {
                let id = new_id("fc_");
                let idx = self.index();
                let item = json!({"type": "function_call", "id": id, "call_id": call.call_id, "name": call.name,
                                  "arguments": "", "status": "in_progress"});
                out.push(self.event(
                    "response.output_item.added",
                    json!({"output_index": idx, "item": item}),
                ));
                self.open = Some(Open::Call { id, call });
            }
        } else if !name.is_empty() {
            if let Some(Open::Call { call, .. } | Open::Custom(call)) = self.open.as_mut() {
                call.name.push_str(name);
            }
        }
        if args.is_empty() {
            return;
        }
        let idx = self.index();
        let delta_for = match self.open.as_mut() {
            Some(Open::Call { id, call }) => {
                call.arguments.push_str(args);
                Some(id.clone())
            }
            Some(Open::Custom(call)) => {
                call.arguments.push_str(args);
                None
            }
            _ => None,
        };
        if let Some(id) = delta_for {
            out.push(self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": idx, "delta": args}),
            ));
        }
    }

    /// The events for one chat chunk (after the relay's `model` rewrite and
    /// any PII restore).
    pub fn on_chunk(&mut self, chunk: &Value) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        self.start(&mut out);
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            })
        else {
            return out;
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(piece) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                self.completion_chars += piece.chars().count();
                self.text(piece, &mut out);
            }
            for tc in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                    self.completion_chars += a.chars().count();
                }
                self.tool_delta(tc, &mut out);
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(f.to_string());
        }
        out
    }

    fn usage(&self, chat_usage: Option<&Value>) -> Value {
        let estimate = Tokens {
            prompt: self.echo.prompt_estimate,
            completion: estimate_tokens(self.completion_chars),
            ..Tokens::default()
        };
        usage_of(chat_usage, estimate)
    }

    /// The stream ended well: the open item done, then the terminal event
    /// (with `approvals` in its response when there are some).
    pub fn finish(&mut self, chat_usage: Option<&Value>, approvals: Vec<Value>) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        self.start(&mut out);
        self.close(&mut out);
        let (status, incomplete) = status_of(self.finish_reason.as_deref());
        let usage = self.usage(chat_usage);
        let mut r = response_object(
            &self.meta,
            &self.echo,
            status,
            self.output.clone(),
            usage,
            incomplete,
            Value::Null,
        );
        if !approvals.is_empty() {
            r["approvals"] = Value::Array(approvals);
        }
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        out.push(self.event(kind, json!({ "response": r })));
        self.ended = true;
        out
    }

    /// The stream failed after it began: `response.failed` (items already
    /// added get no `done`).
    pub fn fail(&mut self, code: &str, message: &str) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        self.start(&mut out);
        self.open = None;
        let usage = self.usage(None);
        let error = json!({"code": code, "message": message});
        let r = response_object(
            &self.meta,
            &self.echo,
            "failed",
            self.output.clone(),
            usage,
            Value::Null,
            error,
        );
        out.push(self.event("response.failed", json!({ "response": r })));
        self.ended = true;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> ResponsesStream {
        let body = json!({"tools": [{"type": "function", "name": "exec"}, {"type": "custom", "name": "apply_patch"}]});
        let echo = Echo::of(body.as_object().unwrap(), vec!["apply_patch".into()], 8);
        ResponsesStream::new(
            ResponseMeta {
                id: "resp_x".into(),
                created_at: 1,
                model: "m".into(),
            },
            echo,
        )
    }

    fn events(frames: &[SseFrame]) -> Vec<Value> {
        frames
            .iter()
            .map(|f| match f {
                SseFrame::Event { event, data } => {
                    let v: Value = serde_json::from_str(data).unwrap();
                    assert_eq!(v["type"], event.as_str());
                    v
                }
                SseFrame::Data(_) => panic!("every event is named"),
            })
            .collect()
    }

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[test]
    fn text_then_calls_follow_the_grammar_with_one_terminal_event() {
        let mut s = stream();
        let mut frames = vec![];
        frames.extend(s.on_chunk(&chunk(json!({"role": "assistant", "content": ""}), None)));
        frames.extend(s.on_chunk(&chunk(json!({"content": "Hel"}), None)));
        frames.extend(s.on_chunk(&chunk(json!({"content": "lo"}), None)));
        frames.extend(s.on_chunk(&chunk(json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "exec", "arguments": "{\"a\""}}]}), None)));
        frames.extend(s.on_chunk(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
            None,
        )));
        frames.extend(s.on_chunk(&chunk(json!({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "apply_patch", "arguments": "{\"input\":"}}]}), None)));
        frames.extend(s.on_chunk(&chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "\"P\"}"}}]}),
            Some("tool_calls"),
        )));
        frames.extend(s.finish(
            Some(&json!({"prompt_tokens": 3, "completion_tokens": 4})),
            vec![],
        ));
        assert!(
            s.finish(None, vec![]).is_empty() && s.fail("x", "y").is_empty(),
            "nothing after the end"
        );
        let evs = events(&frames);
        let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, e) in evs.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        assert_eq!(evs[6]["text"], "Hello");
        assert_eq!(evs[12]["arguments"], "{\"a\":1}");
        assert_eq!(evs[12]["output_index"], 1);
        assert_eq!(evs[15]["delta"], "P");
        assert_eq!(evs[14]["output_index"], 2);
        let done = &evs[18]["response"];
        assert_eq!(done["id"], "resp_x");
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"].as_array().unwrap().len(), 3);
        assert_eq!(done["output"][2]["type"], "custom_tool_call");
        assert_eq!(done["usage"]["total_tokens"], 7);
        assert_eq!(evs[0]["response"]["status"], "in_progress");
        assert_eq!(evs[0]["response"]["usage"], Value::Null);
    }

    #[test]
    fn a_failure_ends_with_response_failed_and_no_done_for_open_items() {
        let mut s = stream();
        let mut frames = s.on_chunk(&chunk(json!({"content": "part"}), None));
        frames.extend(s.fail("upstream_error", "cut"));
        let evs = events(&frames);
        let last = evs.last().unwrap();
        assert_eq!(last["type"], "response.failed");
        assert_eq!(last["response"]["status"], "failed");
        assert_eq!(last["response"]["error"]["code"], "upstream_error");
        assert!(!evs.iter().any(|e| e["type"] == "response.output_item.done"));
        assert!(s.finish(None, vec![]).is_empty());
    }

    #[test]
    fn length_is_incomplete_and_approvals_ride_on_the_terminal_event() {
        let mut s = stream();
        s.on_chunk(&chunk(json!({"content": "x"}), Some("length")));
        let evs = events(&s.finish(None, vec![json!({"id": "a1"})]));
        let last = evs.last().unwrap();
        assert_eq!(last["type"], "response.incomplete");
        assert_eq!(
            last["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        assert_eq!(last["response"]["approvals"][0]["id"], "a1");
    }
}
