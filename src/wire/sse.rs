//! Server-sent events: an incremental parser for what upstreams send and the
//! framing of what we send.
//!
//! The parser follows the WHATWG event-stream rules that matter for model
//! servers: lines end in `\n`, `\r\n` or `\r`; a blank line ends an event;
//! `data:` lines of one event are joined with `\n`; one space after the colon
//! is dropped; lines starting with `:` are comments; an event without data is
//! not dispatched. Bytes may arrive split anywhere (inside a line, inside a
//! UTF-8 character, between `\r` and `\n`): nothing is dispatched before its
//! blank line is in.

use bytes::Bytes;

/// One event as the upstream sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, if any.
    pub event: Option<String>,
    pub data: String,
}

/// Something we send: `data: ...` or `event: NAME` + `data: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseFrame {
    Data(String),
    Event { event: String, data: String },
}

impl SseFrame {
    /// A `data:` frame holding this value as compact JSON.
    pub fn json(value: &serde_json::Value) -> SseFrame {
        SseFrame::Data(value.to_string())
    }

    /// Appends the wire form, ending in a blank line.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            SseFrame::Data(d) => write_event(out, None, d),
            SseFrame::Event { event, data } => write_event(out, Some(event), data),
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::new();
        self.write_to(&mut out);
        Bytes::from(out)
    }
}

/// Appends one event's wire form: `event: NAME` (when named), each line of
/// `data` a `data:` line (JSON has none), and the blank line that ends it.
pub fn write_event(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    // One growth, not one per piece (most events have one data line).
    out.reserve(event.map_or(0, |e| e.len() + 8) + data.len() + 8);
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        // A line break in a name would start a new field.
        if memchr::memchr2(b'\n', b'\r', event.as_bytes()).is_none() {
            out.extend_from_slice(event.as_bytes());
        } else {
            out.extend(event.bytes().filter(|b| *b != b'\n' && *b != b'\r'));
        }
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix('\r').unwrap_or(line).as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Writes `event: NAME` and the start of its `data:` line into `out`: the
/// caller writes the event's JSON (one line: compact JSON has no line
/// break), then [`end_event`]. Translations write their events straight
/// into the output buffer this way, with no frame or tree in between.
pub fn begin_event(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
}

/// Ends an event begun with [`begin_event`].
pub fn end_event(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\n\n");
}

/// Writes a string that needs no escapes (the gateway's own ids and event
/// names) as a JSON string: no scan for characters to escape.
pub fn plain_str(out: &mut Vec<u8>, s: &str) {
    debug_assert!(!s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20));
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Writes `s` as a JSON string.
pub fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing to a Vec cannot fail, and a str always serialises.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Writes a number as JSON.
pub fn json_num<N: serde::Serialize + Copy + Into<i128>>(out: &mut Vec<u8>, n: N) {
    let _ = serde_json::to_writer(&mut *out, &n);
}

/// The frames of SSE bytes (for callers that deal in frames).
pub fn frames_of(bytes: &[u8]) -> Vec<SseFrame> {
    let mut p = SseParser::new();
    p.push(bytes);
    std::iter::from_fn(|| p.next_event())
        .map(|ev| match ev.event {
            Some(event) => SseFrame::Event {
                event,
                data: ev.data,
            },
            None => SseFrame::Data(ev.data),
        })
        .collect()
}

/// `data: [DONE]`, the end of an OpenAI stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// An incremental event-stream parser: `push` bytes as they come, take
/// events with `next_event`, and call `finish` at the end of the input.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Start of the unparsed bytes in `buf`.
    pos: usize,
    data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held that are not yet part of a dispatched event.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.pos + self.data.len()
    }

    /// The next complete event, or None until more bytes arrive.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let rest = &self.buf[self.pos..];
            let Some(i) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.compact();
                return None;
            };
            let term = if rest[i] == b'\r' {
                match rest.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A `\r` at the end: the `\n` may be in the next chunk.
                    None => {
                        self.compact();
                        return None;
                    }
                }
            } else {
                1
            };
            let start = self.pos;
            self.pos += i + term;
            if i == 0 {
                if let Some(ev) = self.dispatch() {
                    return Some(ev);
                }
                continue;
            }
            let buf = std::mem::take(&mut self.buf);
            self.field(&buf[start..start + i]);
            self.buf = buf;
        }
    }

    /// End of input: the last event if the stream ended without its blank
    /// line (lenient: the standard would drop it).
    pub fn finish(&mut self) -> Option<SseEvent> {
        if let Some(ev) = self.next_event() {
            return Some(ev);
        }
        let rest = self.buf[self.pos..].to_vec();
        self.buf.clear();
        self.pos = 0;
        let line = rest.strip_suffix(b"\r").unwrap_or(&rest);
        if !line.is_empty() {
            self.field(line);
        }
        self.dispatch()
    }

    fn compact(&mut self) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    fn field(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return; // comment
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                // Checked as UTF-8 once (lossy only for what is not).
                let name = match std::str::from_utf8(value) {
                    Ok(s) => s.to_owned(),
                    Err(_) => String::from_utf8_lossy(value).into_owned(),
                };
                self.event = Some(name);
            }
            _ => {} // id, retry and unknown fields do not matter here
        }
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        let data = std::mem::take(&mut self.data);
        let data = match String::from_utf8(data) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &mut SseParser) -> Vec<SseEvent> {
        std::iter::from_fn(|| p.next_event()).collect()
    }

    fn data(s: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: s.into(),
        }
    }

    #[test]
    fn splits_events_on_blank_lines() {
        let mut p = SseParser::new();
        p.push(b"data: {\"a\":1}\n\ndata: [DONE]\n\n");
        assert_eq!(all(&mut p), vec![data("{\"a\":1}"), data("[DONE]")]);
    }

    #[test]
    fn handles_crlf_and_cr_line_ends() {
        let mut p = SseParser::new();
        p.push(b"data: one\r\n\r\ndata: two\r\rdata: three\n\n");
        assert_eq!(all(&mut p), vec![data("one"), data("two"), data("three")]);
    }

    #[test]
    fn an_event_split_across_chunks_anywhere_comes_out_whole() {
        let wire = "data: {\"x\":\"héllo\"}\r\n\r\ndata: b\n\n";
        for cut in 0..wire.len() {
            let mut p = SseParser::new();
            let bytes = wire.as_bytes();
            p.push(&bytes[..cut]);
            let mut got = all(&mut p);
            p.push(&bytes[cut..]);
            got.extend(all(&mut p));
            assert_eq!(
                got,
                vec![data("{\"x\":\"héllo\"}"), data("b")],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn byte_by_byte_feeding_gives_the_same_events() {
        let wire = b"event: ping\ndata: 1\n\n: comment\ndata: a\ndata: b\n\n";
        let mut p = SseParser::new();
        let mut got = vec![];
        for b in wire {
            p.push(&[*b]);
            got.extend(all(&mut p));
        }
        assert_eq!(
            got,
            vec![
                SseEvent {
                    event: Some("ping".into()),
                    data: "1".into()
                },
                data("a\nb")
            ]
        );
    }

    #[test]
    fn nothing_is_dispatched_before_the_blank_line() {
        let mut p = SseParser::new();
        p.push(b"data: partial\n");
        assert_eq!(p.next_event(), None);
        p.push(b"\n");
        assert_eq!(p.next_event(), Some(data("partial")));
    }

    #[test]
    fn comments_and_events_without_data_are_skipped() {
        let mut p = SseParser::new();
        p.push(b": keep-alive\n\nevent: x\n\nid: 3\nretry: 10\n\ndata:no-space\n\n");
        assert_eq!(all(&mut p), vec![data("no-space")]);
    }

    #[test]
    fn finish_returns_an_unterminated_last_event() {
        let mut p = SseParser::new();
        p.push(b"data: a\n\ndata: [DONE]");
        assert_eq!(p.next_event(), Some(data("a")));
        assert_eq!(p.next_event(), None);
        assert_eq!(p.finish(), Some(data("[DONE]")));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn pending_bytes_counts_what_is_held() {
        let mut p = SseParser::new();
        p.push(b"data: 12345");
        assert_eq!(p.next_event(), None);
        assert_eq!(p.pending_bytes(), 11);
        p.push(b"\n\n");
        assert!(p.next_event().is_some());
        assert_eq!(p.pending_bytes(), 0);
    }

    #[test]
    fn frames_have_their_wire_form() {
        assert_eq!(
            SseFrame::Data("{\"a\":1}".into()).to_bytes(),
            Bytes::from_static(b"data: {\"a\":1}\n\n")
        );
        assert_eq!(
            SseFrame::Event {
                event: "ag-ui".into(),
                data: "x\ny".into()
            }
            .to_bytes(),
            Bytes::from_static(b"event: ag-ui\ndata: x\ndata: y\n\n")
        );
    }
}
