//! A chat stream made into the Responses event grammar (contract, "Streams"):
//! every event has `type` and `sequence_number` (0, 1, ...); the response is
//! created and in progress first; items are added, filled and done one at a
//! time, numbered in the order they start; exactly one terminal event
//! (`response.completed`, `response.incomplete` or `response.failed`) ends
//! the stream, and nothing follows it.

use serde_json::{json, Value};

use crate::spend::Cost;
use crate::usage::{estimate_tokens, Tokens};
use crate::wire::chat::chunk::{ChunkDelta, ToolCallDelta};
use crate::wire::responses::answer::{
    call_item, custom_input, status_of, usage_of, write_message_item_quoted, write_output_text,
    write_output_text_quoted, write_response, Echo, ResponseMeta,
};
use crate::wire::responses::new_id;
use crate::wire::sse::{
    begin_event, end_event, frames_of, json_num, json_str, plain_str, SseFrame,
};

/// The item being streamed.
enum Open {
    Message {
        id: String,
        /// The text so far as a JSON string, quotes and all: each delta is
        /// escaped once, as it goes out, and the `.done` events and the item
        /// copy it (JSON escaping is per character, so the pieces' escapes
        /// joined are the whole text's).
        quoted: Vec<u8>,
    },
    /// A function call, announced as it streams.
    Call { id: String, call: Call },
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

/// One stream's translation; see the module documentation. Events are
/// written straight into the caller's output buffer (`*_into`); the
/// methods without `_into` give the same events as frames.
pub struct ResponsesStream {
    meta: ResponseMeta,
    echo: Echo,
    seq: u64,
    started: bool,
    ended: bool,
    /// The items done, in order, each as JSON text.
    output: Vec<String>,
    open: Option<Open>,
    finish_reason: Option<String>,
    completion_chars: usize,
    /// The request's cost, for the terminal response's usage (set as the
    /// stream ends well).
    cost: Option<Cost>,
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
            cost: None,
        }
    }

    /// The request's cost, which [`ResponsesStream::finish`] puts in the
    /// terminal response's `usage`.
    pub fn set_cost(&mut self, cost: Cost) {
        self.cost = Some(cost);
    }

    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// Begins an event: `{"type":KIND,"sequence_number":N` (the caller
    /// writes `,` and its members, then [`Self::end`]).
    fn begin(&mut self, out: &mut Vec<u8>, kind: &str) {
        begin_event(out, kind);
        out.extend_from_slice(b"{\"type\":");
        plain_str(out, kind);
        out.extend_from_slice(b",\"sequence_number\":");
        json_num(out, self.seq);
        self.seq += 1;
    }

    fn end(out: &mut Vec<u8>) {
        out.push(b'}');
        end_event(out);
    }

    /// An event whose members are those of the object `fields`.
    fn event(&mut self, out: &mut Vec<u8>, kind: &str, fields: &Value) {
        self.begin(out, kind);
        if let Some(o) = fields.as_object() {
            for (k, v) in o {
                out.push(b',');
                json_str(out, k);
                out.push(b':');
                // A tree always serialises.
                let _ = serde_json::to_writer(&mut *out, v);
            }
        }
        Self::end(out);
    }

    /// `,"item_id":ID,"output_index":N`
    fn item_ref(out: &mut Vec<u8>, id: &str, idx: usize) {
        out.extend_from_slice(b",\"item_id\":");
        // The gateway's own id: nothing to escape.
        plain_str(out, id);
        out.extend_from_slice(b",\"output_index\":");
        json_num(out, idx as u64);
    }

    /// The response object as it stands (`output` so far), with `status`.
    fn response(
        &self,
        out: &mut Vec<u8>,
        status: &str,
        usage: &Value,
        incomplete: &Value,
        error: &Value,
        approvals: &[Value],
    ) {
        out.extend_from_slice(b",\"response\":");
        // A tree always serialises.
        let usage = serde_json::to_vec(usage).unwrap_or_default();
        write_response(
            out,
            &self.meta,
            &self.echo,
            status,
            &self.output,
            &usage,
            incomplete,
            error,
            approvals,
        );
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        for kind in ["response.created", "response.in_progress"] {
            self.begin(out, kind);
            self.response(
                out,
                "in_progress",
                &Value::Null,
                &Value::Null,
                &Value::Null,
                &[],
            );
            Self::end(out);
        }
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Ends the open item with its `.done` events.
    fn close(&mut self, out: &mut Vec<u8>) {
        let idx = self.index();
        match self.open.take() {
            None => {}
            Some(Open::Message { id, mut quoted }) => {
                quoted.push(b'"');
                self.begin(out, "response.output_text.done");
                Self::item_ref(out, &id, idx);
                out.extend_from_slice(b",\"content_index\":0,\"text\":");
                out.extend_from_slice(&quoted);
                Self::end(out);
                self.begin(out, "response.content_part.done");
                Self::item_ref(out, &id, idx);
                out.extend_from_slice(b",\"content_index\":0,\"part\":");
                write_output_text_quoted(out, &quoted);
                Self::end(out);
                let mut item = Vec::with_capacity(quoted.len() + 128);
                write_message_item_quoted(&mut item, &id, &quoted, "completed");
                self.begin(out, "response.output_item.done");
                out.extend_from_slice(b",\"output_index\":");
                json_num(out, idx as u64);
                out.extend_from_slice(b",\"item\":");
                out.extend_from_slice(&item);
                Self::end(out);
                self.output
                    .push(String::from_utf8(item).unwrap_or_default());
            }
            Some(Open::Call { id, call }) => {
                self.event(out, "response.function_call_arguments.done",
                    &json!({"item_id": id, "output_index": idx, "name": call.name, "arguments": call.arguments}));
                let item = call_item(
                    &self.echo,
                    Some(&id),
                    &call.call_id,
                    &call.name,
                    &call.arguments,
                );
                self.event(
                    out,
                    "response.output_item.done",
                    &json!({"output_index": idx, "item": item}),
                );
                self.output.push(item.to_string());
            }
            Some(Open::Custom(call)) => {
                let id = new_id("ctc_");
                let input = custom_input(&call.arguments);
                let added = json!({"type": "custom_tool_call", "id": id, "call_id": call.call_id,
                                   "name": call.name, "input": "", "status": "in_progress"});
                self.event(
                    out,
                    "response.output_item.added",
                    &json!({"output_index": idx, "item": added}),
                );
                self.event(
                    out,
                    "response.custom_tool_call_input.delta",
                    &json!({"item_id": id, "output_index": idx, "delta": input}),
                );
                self.event(
                    out,
                    "response.custom_tool_call_input.done",
                    &json!({"item_id": id, "output_index": idx, "input": input}),
                );
                let item = call_item(
                    &self.echo,
                    Some(&id),
                    &call.call_id,
                    &call.name,
                    &call.arguments,
                );
                self.event(
                    out,
                    "response.output_item.done",
                    &json!({"output_index": idx, "item": item}),
                );
                self.output.push(item.to_string());
            }
        }
    }

    /// A piece of text, written as a JSON string by `piece`.
    fn text(&mut self, piece: impl FnOnce(&mut Vec<u8>), out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            self.close(out);
            let id = new_id("msg_");
            let idx = self.index();
            self.begin(out, "response.output_item.added");
            out.extend_from_slice(b",\"output_index\":");
            json_num(out, idx as u64);
            out.extend_from_slice(b",\"item\":{\"type\":\"message\",\"id\":");
            json_str(out, &id);
            out.extend_from_slice(
                b",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}",
            );
            Self::end(out);
            self.begin(out, "response.content_part.added");
            Self::item_ref(out, &id, idx);
            out.extend_from_slice(b",\"content_index\":0,\"part\":");
            write_output_text(out, "");
            Self::end(out);
            self.open = Some(Open::Message {
                id,
                quoted: vec![b'"'],
            });
        }
        let idx = self.index();
        let Some(Open::Message { id, quoted }) = self.open.as_mut() else {
            return;
        };
        begin_event(out, "response.output_text.delta");
        out.extend_from_slice(b"{\"type\":\"response.output_text.delta\",\"sequence_number\":");
        json_num(out, self.seq);
        self.seq += 1;
        Self::item_ref(out, id, idx);
        out.extend_from_slice(b",\"content_index\":0,\"delta\":");
        let at = out.len();
        piece(out);
        // The piece's escaped text, without its quotes.
        quoted.extend_from_slice(out.get(at + 1..out.len() - 1).unwrap_or_default());
        Self::end(out);
    }

    fn tool_delta(&mut self, tc: &ToolCallDelta<'_>, out: &mut Vec<u8>) {
        let upstream_index = tc.index;
        let name = tc.name.as_deref().unwrap_or("");
        let args = tc.arguments.as_deref().unwrap_or("");
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
                call_id: tc.id.as_deref().unwrap_or("").to_string(),
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
                self.event(
                    out,
                    "response.output_item.added",
                    &json!({"output_index": idx, "item": item}),
                );
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
            self.begin(out, "response.function_call_arguments.delta");
            Self::item_ref(out, &id, idx);
            out.extend_from_slice(b",\"delta\":");
            json_str(out, args);
            Self::end(out);
        }
    }

    /// The events for one chat chunk (after the relay's `model` rewrite and
    /// any PII restore).
    pub fn on_chunk(&mut self, chunk: &Value) -> Vec<SseFrame> {
        let mut out = Vec::new();
        self.on_chunk_into(&ChunkDelta::of_tree(chunk), &mut out);
        frames_of(&out)
    }

    /// The events for one chat chunk, read as `delta` (its choice 0), into `out`.
    pub fn on_chunk_into(&mut self, delta: &ChunkDelta<'_>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.start(out);
        if let Some(piece) = delta.content.as_deref().filter(|s| !s.is_empty()) {
            self.completion_chars += piece.chars().count();
            self.text(|out| delta.write_content(out), out);
        }
        for tc in &delta.tool_calls {
            if let Some(a) = tc.arguments.as_deref() {
                self.completion_chars += a.chars().count();
            }
            self.tool_delta(tc, out);
        }
        if let Some(f) = delta.finish_reason.as_deref() {
            self.finish_reason = Some(f.to_string());
        }
    }

    fn usage(&self, chat_usage: Option<&Value>) -> Value {
        let estimate = Tokens::estimate(
            self.echo.prompt_estimate,
            estimate_tokens(self.completion_chars),
        );
        usage_of(chat_usage, estimate)
    }

    /// The stream ended well: the open item done, then the terminal event
    /// (with `approvals` in its response when there are some).
    pub fn finish(&mut self, chat_usage: Option<&Value>, approvals: Vec<Value>) -> Vec<SseFrame> {
        let mut out = Vec::new();
        self.finish_into(chat_usage, &approvals, &mut out);
        frames_of(&out)
    }

    /// [`Self::finish`] into `out`.
    pub fn finish_into(
        &mut self,
        chat_usage: Option<&Value>,
        approvals: &[Value],
        out: &mut Vec<u8>,
    ) {
        if self.ended {
            return;
        }
        self.start(out);
        self.close(out);
        let (status, incomplete) = status_of(self.finish_reason.as_deref());
        let mut usage = self.usage(chat_usage);
        if let (Some(c), Some(u)) = (&self.cost, usage.as_object_mut()) {
            c.write_into(u);
        }
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.begin(out, kind);
        self.response(out, status, &usage, &incomplete, &Value::Null, approvals);
        Self::end(out);
        self.ended = true;
    }

    /// The stream failed after it began: `response.failed` (items already
    /// added get no `done`).
    pub fn fail(&mut self, code: &str, message: &str) -> Vec<SseFrame> {
        let mut out = Vec::new();
        if self.ended {
            return Vec::new();
        }
        self.start(&mut out);
        self.open = None;
        let usage = self.usage(None);
        let error = json!({"code": code, "message": message});
        self.begin(&mut out, "response.failed");
        self.response(&mut out, "failed", &usage, &Value::Null, &error, &[]);
        Self::end(&mut out);
        self.ended = true;
        frames_of(&out)
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

    #[test]
    fn the_terminal_usage_carries_the_cost_it_was_given() {
        let mut s = stream();
        s.on_chunk(&chunk(json!({"content": "x"}), Some("stop")));
        s.set_cost(Cost {
            status: crate::spend::CostStatus::Estimated,
            nanos: Some(7),
            version: None,
        });
        let evs = events(&s.finish(None, vec![]));
        let usage = &evs.last().unwrap()["response"]["usage"];
        assert_eq!(usage["cost"], "0.000000007");
        assert_eq!(usage["cost_status"], "estimated");

        let mut s = stream();
        s.on_chunk(&chunk(json!({"content": "x"}), Some("stop")));
        let evs = events(&s.finish(None, vec![]));
        let usage = &evs.last().unwrap()["response"]["usage"];
        assert!(usage.get("cost").is_none() && usage.get("cost_status").is_none());
    }
}
