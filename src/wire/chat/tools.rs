//! A chat request's `tools` list: kept as the client's JSON text, each tool
//! read for its function name only (in one pass, [`scan_tool`], checked
//! against serde in tests and by the fuzz target), and lists read before
//! remembered by their exact text, so an app that sends the same list every
//! turn has it read once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// At most this many `tools` in one agent chat request.
pub const MAX_REQUEST_TOOLS: usize = 128;

/// A request's `tools` list as the client wrote it, what each of its tools
/// is, and which of them go upstream.
#[derive(Debug)]
pub struct KeptTools {
    /// The list's text, `[...]`.
    pub(super) text: ListText,
    pub(super) read: Arc<ReadList>,
    /// Per tool of `read`: whether it goes upstream.
    pub(super) keep: Vec<bool>,
}

/// A list's text: the request's own, or the same text remembered (see
/// [`ChatRequest::parse`]).
#[derive(Debug)]
pub(super) enum ListText {
    Own(Box<RawValue>),
    Remembered(Arc<str>),
}

impl ListText {
    pub(super) fn get(&self) -> &str {
        match self {
            ListText::Own(text) => text.get(),
            ListText::Remembered(text) => text,
        }
    }
}

/// What each tool of a list is: a pure function of the list's text, so it
/// is read once per distinct text (see [`read_list`]).
#[derive(Debug)]
pub(super) struct ReadList {
    /// How many tools the list has.
    pub(super) len: usize,
    /// Each tool, unless the list has more than [`MAX_REQUEST_TOOLS`] (it is
    /// refused then, and its tools are not read).
    pub(super) tools: Vec<ReadTool>,
}

/// One tool of a list.
#[derive(Debug)]
pub(super) struct ReadTool {
    /// Where its text is in the list's.
    pub(super) at: usize,
    pub(super) len: usize,
    /// `function.name` (shared by every request that sends the list), or why the tool is refused.
    pub(super) name: Result<Arc<str>, ToolFault>,
}

/// The tools a request offers, each with a name by the rule (see
/// [`ChatRequest::offered_tools`]): the request's reading of its list,
/// shared, so the names are lent rather than copied (their shared pointers'
/// counts, touched from both serving threads, cost more than the rest of
/// the decision).
#[derive(Debug, Default)]
pub struct OfferedTools {
    pub(super) read: Option<Arc<ReadList>>,
    pub(super) keep: Vec<bool>,
}

impl OfferedTools {
    /// The function names, in offered order.
    pub fn names(&self) -> Vec<&str> {
        let Some(read) = &self.read else {
            return Vec::new();
        };
        read.tools
            .iter()
            .zip(&self.keep)
            .filter(|(_, &k)| k)
            .filter_map(|(t, _)| t.name.as_deref().ok())
            .collect()
    }
}

/// Why an offered tool is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ToolFault {
    /// Not an object with one `function` object that has one `name` by the
    /// tool-name rule.
    Name,
    /// A `type` other than `"function"`: the rules govern function tools,
    /// and another kind could name a held tool where they do not look.
    NotFunction,
    /// Nested deeper than [`TOOL_MAX_DEPTH`].
    TooDeep,
}

/// How deeply a tool's JSON may nest (the tool object is level 1): what a
/// request parsed whole allowed, since serde_json refuses a 128th level and
/// the body and the list take two. A tool kept as text is not parsed by the
/// gateway, but the upstream parses it.
pub const TOOL_MAX_DEPTH: usize = 125;

/// Lists read before, by their exact text (compared whole, never by hash
/// alone): an agent app sends the same `tools` list with every turn, and
/// reading its tools again was a tenth of agent chat's CPU. Bounded by the
/// text it keeps; emptied when full.
#[derive(Default)]
pub(super) struct ReadLists {
    pub(super) by_text: HashMap<Arc<str>, Arc<ReadList>, foldhash::fast::RandomState>,
    /// The same lists by their first [`LIST_HEAD`] bytes (shorter ones are
    /// not here), at most [`LISTS_PER_HEAD`] each, the newest last: how
    /// [`ChatRequest::parse`] finds a list in a body without reading it.
    pub(super) by_head: HashMap<[u8; LIST_HEAD], Vec<KnownList>, foldhash::fast::RandomState>,
    /// What the entries take, in bytes (see [`kept_bytes`]).
    pub(super) bytes: usize,
}

/// A remembered list: its text and what its tools are.
pub(super) type KnownList = (Arc<str>, Arc<ReadList>);

/// Lists of one app share their beginning (the first tools), so a head
/// holds several lists. One pushed out of its head stays in `by_text`, and
/// goes back into its head the next time a body brings it (see
/// [`remembered`]).
pub(super) const LIST_HEAD: usize = 64;
pub(super) const LISTS_PER_HEAD: usize = 8;

/// The most [`ReadLists`] keeps (counted by [`kept_bytes`]), and the longest list it keeps.
pub(super) const READ_LISTS_BYTES: usize = 1024 * 1024;
pub(super) const READ_LIST_MAX_BYTES: usize = 64 * 1024;

pub(super) static READ_LISTS: std::sync::LazyLock<parking_lot::RwLock<ReadLists>> =
    std::sync::LazyLock::new(Default::default);

/// What each tool of the list `text` (a JSON array) is: for a list the
/// client sent (`remember`), as read before when it was.
pub(super) fn read_list(text: &str, remember: bool) -> Result<Arc<ReadList>, serde_json::Error> {
    if !remember {
        return read_list_now(text).map(Arc::new);
    }
    remembered(&READ_LISTS, text)
}

/// [`read_list`] through `lists` (the process's own, or a test's).
pub(super) fn remembered(
    lists: &parking_lot::RwLock<ReadLists>,
    text: &str,
) -> Result<Arc<ReadList>, serde_json::Error> {
    let known = {
        let lists = lists.read();
        lists.by_text.get_key_value(text).map(|(text, read)| {
            let in_head = lists.in_head(text);
            ((Arc::clone(text), Arc::clone(read)), in_head)
        })
    };
    if let Some(((text, read), in_head)) = known {
        // Remembered, but pushed out of its head, or this body would not
        // have been read whole: back into it.
        if !in_head {
            lists.write().put_in_head(&text, &read);
        }
        return Ok(read);
    }
    let read = Arc::new(read_list_now(text)?);
    if text.len() <= READ_LIST_MAX_BYTES && read.len <= MAX_REQUEST_TOOLS {
        let cost = kept_bytes(text, &read);
        let mut lists = lists.write();
        if lists.bytes + cost > READ_LISTS_BYTES {
            *lists = ReadLists::default();
        }
        if !lists.by_text.contains_key(text) {
            let text: Arc<str> = text.into();
            lists.by_text.insert(Arc::clone(&text), Arc::clone(&read));
            lists.put_in_head(&text, &read);
            lists.bytes += cost;
        }
    }
    Ok(read)
}

impl ReadLists {
    /// Whether `text`, remembered, can be found by its head (always for a
    /// list too short to have one: there is nothing to do for it).
    pub(super) fn in_head(&self, text: &Arc<str>) -> bool {
        text.as_bytes()
            .first_chunk::<LIST_HEAD>()
            .is_none_or(|head| {
                self.by_head
                    .get(head)
                    .is_some_and(|known| known.iter().any(|(t, _)| Arc::ptr_eq(t, text)))
            })
    }

    /// Puts a remembered list into its head, the oldest of a full head out.
    pub(super) fn put_in_head(&mut self, text: &Arc<str>, read: &Arc<ReadList>) {
        if self.in_head(text) {
            return;
        }
        if let Some(head) = text.as_bytes().first_chunk::<LIST_HEAD>() {
            let known = self.by_head.entry(*head).or_default();
            if known.len() == LISTS_PER_HEAD {
                known.remove(0);
            }
            known.push((Arc::clone(text), Arc::clone(read)));
        }
    }
}

/// What a remembered list takes, counted on the high side: its text, and
/// its share of the maps' slots (with their spare capacity), of its head's
/// list, the `Arc`s' counts, and each tool's span and name of at most 64
/// bytes, so that many small lists count too.
pub(super) fn kept_bytes(text: &str, read: &ReadList) -> usize {
    text.len() + 640 + 128 * read.tools.len()
}

/// Where a remembered list is the `tools` of `body`: its start, and the list.
/// Found by walking the body's top-level members (skipping their values,
/// unread) and comparing the text at the `tools` value with the remembered
/// lists of the same head. `None` when the body is not an object, has no
/// `tools`, more than one, or an escaped key (it could spell `tools`), or
/// when the list is not in its head (not remembered, shorter than a head,
/// or pushed out of it). The body is not validated here: a list that is
/// valid JSON standing where a value starts leaves the body valid or not as
/// the rest of it is, so the caller parses the rest (see
/// [`ChatRequest::parse`]). The lock is taken only to look at the list.
pub(super) fn remembered_list_in(
    lists: &parking_lot::RwLock<ReadLists>,
    body: &[u8],
) -> Option<(usize, KnownList)> {
    memchr::memmem::find(body, b"\"tools\"")?;
    let mut s = Scanner::new(body);
    s.long_strings = true;
    s.ws();
    if s.peek() != Some(b'{') {
        return None;
    }
    let (mut found, mut give_up) = (None, false);
    s.object(|s, key, key_escaped| {
        if give_up || key_escaped || (key == b"tools" && found.is_some()) {
            give_up = true;
            s.i = s.b.len();
        } else if key == b"tools" {
            let at = s.i;
            let rest = s.b.get(at..).unwrap_or_default();
            let known = rest.first_chunk::<LIST_HEAD>().and_then(|head| {
                let lists = lists.read();
                let (text, read) = lists
                    .by_head
                    .get(head)?
                    .iter()
                    .find(|(text, _)| rest.starts_with(text.as_bytes()))?;
                Some((Arc::clone(text), Arc::clone(read)))
            });
            match known {
                Some((text, read)) => {
                    s.i = at + text.len();
                    found = Some((at, (text, read)));
                }
                None => {
                    give_up = true;
                    s.i = s.b.len();
                }
            }
        } else {
            s.skip_value();
        }
    });
    if give_up {
        return None;
    }
    found
}

pub(super) fn read_list_now(text: &str) -> Result<ReadList, serde_json::Error> {
    let items: Vec<&RawValue> = serde_json::from_str(text)?;
    let len = items.len();
    if len > MAX_REQUEST_TOOLS {
        return Ok(ReadList {
            len,
            tools: Vec::new(),
        });
    }
    let base = text.as_ptr() as usize;
    let tools = items
        .iter()
        .map(|t| {
            let t = t.get();
            ReadTool {
                // Borrowed from `text`: an offset into it.
                at: t.as_ptr() as usize - base,
                len: t.len(),
                name: read_tool(t).map(Arc::from),
            }
        })
        .collect();
    Ok(ReadList { len, tools })
}

impl KeptTools {
    /// `text` is a JSON array; `remember` as for [`read_list`].
    pub(super) fn new(text: Box<RawValue>, remember: bool) -> Result<KeptTools, serde_json::Error> {
        let read = read_list(text.get(), remember)?;
        Ok(KeptTools::of(ListText::Own(text), read))
    }

    pub(super) fn of(text: ListText, read: Arc<ReadList>) -> KeptTools {
        let keep = vec![true; read.tools.len()];
        KeptTools { text, read, keep }
    }

    /// The kept tools, each as the client wrote it.
    pub fn texts(&self) -> Vec<&str> {
        self.kept().map(|(text, _)| text).collect()
    }

    pub(super) fn kept(&self) -> impl Iterator<Item = (&str, &ReadTool)> {
        let text = self.text.get();
        self.read
            .tools
            .iter()
            .zip(&self.keep)
            .filter(|(_, &k)| k)
            .map(move |(t, _)| (text.get(t.at..t.at + t.len).unwrap_or("null"), t))
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.keep.contains(&true)
    }
}

/// A tool's `function.name`, or why the tool is refused: by [`scan_tool`]
/// unless a key or string it reads is escaped, else by serde.
pub(super) fn read_tool(text: &str) -> Result<String, ToolFault> {
    scan_tool(text).unwrap_or_else(|| serde_read(text))
}

/// A tool read by serde: the nesting limit first, then [`tool_name`].
pub(super) fn serde_read(text: &str) -> Result<String, ToolFault> {
    if nests_deeper_than(text, TOOL_MAX_DEPTH) {
        Err(ToolFault::TooDeep)
    } else {
        tool_name(text)
    }
}

/// Whether the one-pass scan and serde read a tool alike (for the fuzz target).
#[doc(hidden)]
pub fn scan_agrees_with_serde(text: &str) -> bool {
    scan_tool(text).is_none_or(|fast| fast == serde_read(text))
}

/// Reads a tool the way [`tool_name`] and [`nests_deeper_than`] do, in one
/// pass over its text without serde (which was a tenth of agent chat's CPU:
/// the text had already been checked once, while it was captured). `text`
/// must be one valid JSON value, as a captured [`RawValue`] is. `None` when a
/// key of the tool or of its function, the name or the type holds an escape:
/// serde decodes those.
pub(super) fn scan_tool(text: &str) -> Option<Result<String, ToolFault>> {
    let mut s = Scanner::new(text.as_bytes());
    let (mut name, mut kind, mut bad, mut escaped) = (None::<&[u8]>, None, false, false);
    s.ws();
    if s.peek() == Some(b'{') {
        let (mut function_seen, mut name_seen) = (false, false);
        s.object(|s, key, key_escaped| {
            if key_escaped {
                escaped = true;
                s.skip_value();
                return;
            }
            match key {
                b"function" if s.peek() == Some(b'{') => {
                    bad |= function_seen;
                    function_seen = true;
                    s.object(|s, key, key_escaped| {
                        escaped |= key_escaped;
                        if key == b"name" && !key_escaped {
                            bad |= name_seen;
                            name_seen = true;
                            match s.string_value() {
                                Some((v, e)) => {
                                    escaped |= e;
                                    name = Some(v);
                                }
                                None => bad = true,
                            }
                        } else {
                            s.skip_value();
                        }
                    });
                }
                b"type" => {
                    bad |= kind.is_some();
                    match s.string_value() {
                        Some((v, e)) => {
                            escaped |= e;
                            kind = Some(v == b"function");
                        }
                        None => {
                            bad = true;
                            kind = Some(true);
                        }
                    }
                }
                b"function" => {
                    bad = true;
                    s.skip_value();
                }
                _ => s.skip_value(),
            }
        });
    } else {
        bad = true;
        s.skip_value();
    }
    if s.max_depth > TOOL_MAX_DEPTH {
        return Some(Err(ToolFault::TooDeep));
    }
    if escaped {
        return None;
    }
    Some(match (bad, kind, name) {
        (true, _, _) => Err(ToolFault::Name),
        (false, Some(false), _) => Err(ToolFault::NotFunction),
        (false, _, Some(n)) => std::str::from_utf8(n)
            .ok()
            .filter(|n| crate::wire::is_tool_name(n))
            .map(str::to_string)
            .ok_or(ToolFault::Name),
        (false, _, None) => Err(ToolFault::Name),
    })
}

/// A cursor over JSON text that tracks how deeply it nests. It reads valid
/// JSON as a parser does; over any other bytes it moves on without failing
/// (and without panicking), and what it finds there is not to be trusted
/// on its own (see [`remembered_list_in`]).
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    depth: usize,
    max_depth: usize,
    /// Whether strings may be long (message text), so that finding their
    /// end with `memchr` pays.
    long_strings: bool,
}

impl<'a> Scanner<'a> {
    fn new(b: &'a [u8]) -> Scanner<'a> {
        Scanner {
            b,
            i: 0,
            depth: 0,
            max_depth: 0,
            long_strings: false,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(crate::wire::json::is_ws) {
            self.i += 1;
        }
    }

    fn open(&mut self) {
        self.depth += 1;
        self.max_depth = self.max_depth.max(self.depth);
        self.i += 1;
    }

    /// At a `"`: the string's text between its quotes and whether it holds
    /// an escape; moves past the closing quote.
    fn string(&mut self) -> (&'a [u8], bool) {
        // A plain loop unless strings may be long: keys and names are too
        // short for memchr to pay.
        let start = self.i + 1;
        let (mut j, mut escaped) = (start, false);
        loop {
            if self.long_strings {
                let rest = self.b.get(j..).unwrap_or_default();
                j += memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
            }
            let Some(&c) = self.b.get(j) else { break };
            match c {
                b'"' => {
                    self.i = j + 1;
                    return (&self.b[start..j], escaped);
                }
                b'\\' => {
                    escaped = true;
                    j += 2;
                }
                _ => j += 1,
            }
        }
        self.i = self.b.len();
        (self.b.get(start..).unwrap_or_default(), escaped)
    }

    /// A string value, or `None` (the value skipped) when it is not one.
    fn string_value(&mut self) -> Option<(&'a [u8], bool)> {
        if self.peek() == Some(b'"') {
            Some(self.string())
        } else {
            self.skip_value();
            None
        }
    }

    /// Moves past one value.
    fn skip_value(&mut self) {
        match self.peek() {
            Some(b'"') => {
                self.string();
            }
            Some(b'{' | b'[') => {
                let outer = self.depth;
                self.open();
                while self.depth > outer {
                    match self.peek() {
                        Some(b'"') => {
                            self.string();
                        }
                        Some(b'{' | b'[') => self.open(),
                        Some(b'}' | b']') => {
                            self.depth -= 1;
                            self.i += 1;
                        }
                        Some(_) => self.i += 1,
                        None => break,
                    }
                }
                self.depth = outer;
            }
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
            }
        }
    }

    /// At a `{`: calls `member` with each key (its text, whether escaped)
    /// and the cursor at the value, which `member` must move past; moves past
    /// the closing `}`.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8], bool)) {
        let outer = self.depth;
        self.open();
        loop {
            self.ws();
            match self.peek() {
                Some(b'"') => {
                    let (key, escaped) = self.string();
                    self.ws();
                    if self.peek() == Some(b':') {
                        self.i += 1;
                    }
                    self.ws();
                    member(self, key, escaped);
                    self.ws();
                    if self.peek() == Some(b',') {
                        self.i += 1;
                    }
                }
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                // Not reached on valid JSON; ends the scan either way.
                _ => {
                    self.i = self.b.len();
                    break;
                }
            }
        }
        self.depth = outer;
    }
}

/// Whether the JSON `text` nests objects and lists deeper than `limit`.
pub(super) fn nests_deeper_than(text: &str, limit: usize) -> bool {
    let bytes = text.as_bytes();
    // Most tools have a few brackets: counting them is cheap and settles it.
    if bytes.iter().filter(|&&b| b == b'{' || b == b'[').count() <= limit {
        return false;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Writes `"tools":[...]` of tools as JSON text, each as written.
pub fn write_tools(out: &mut Vec<u8>, tools: &[&str]) {
    out.extend_from_slice(b"\"tools\":[");
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(t.as_bytes());
    }
    out.push(b']');
}

/// A tool's `function.name` by the tool-name rule, read in one pass over the
/// tool's text: refused unless the tool is an object with one `function`
/// object that has one `name` string, and at most one `type`, `"function"`.
pub(super) fn tool_name(text: &str) -> Result<String, ToolFault> {
    /// A tool object: its `function`'s name, and whether it is a function tool.
    struct Tool;
    impl<'de> Visitor<'de> for Tool {
        type Value = (Option<String>, bool);
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a tool object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut name, mut seen, mut kind) = (None, false, None);
            while let Some(k) = map.next_key::<Key<'de>>()? {
                if k.0 == "function" {
                    if seen {
                        return Err(de::Error::duplicate_field("function"));
                    }
                    seen = true;
                    name = map.next_value::<FunctionName>()?.0;
                } else if k.0 == "type" {
                    if kind.is_some() {
                        return Err(de::Error::duplicate_field("type"));
                    }
                    kind = Some(map.next_value::<Key<'de>>()?.0 == "function");
                } else {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
            Ok((name, kind.unwrap_or(true)))
        }
    }
    /// A function object: its `name`.
    struct FunctionName(Option<String>);
    impl<'de> Deserialize<'de> for FunctionName {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct F;
            impl<'de> Visitor<'de> for F {
                type Value = FunctionName;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a function object")
                }
                fn visit_map<A: MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<FunctionName, A::Error> {
                    let mut name: Option<String> = None;
                    while let Some(k) = map.next_key::<Key<'de>>()? {
                        if k.0 == "name" {
                            if name.is_some() {
                                return Err(de::Error::duplicate_field("name"));
                            }
                            name = Some(map.next_value()?);
                        } else {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                    Ok(FunctionName(name))
                }
            }
            d.deserialize_map(F)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    match de.deserialize_map(Tool) {
        Ok((_, false)) => Err(ToolFault::NotFunction),
        Ok((Some(name), true)) if crate::wire::is_tool_name(&name) => Ok(name),
        Ok((Some(_), true)) => Err(ToolFault::Name),
        Ok((None, true)) | Err(_) => Err(ToolFault::Name),
    }
}

/// An object key, borrowed unless it has escapes.
pub(super) struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct K;
        impl<'de> Visitor<'de> for K {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(K)
    }
}
