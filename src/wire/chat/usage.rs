//! The figures of a chat `usage` object, read from a tree or typed from its
//! text (one rule for both): each is None when absent or not a whole number
//! that fits an `i64`, as a tree's `as_i64` reads it.

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::usage::Tokens;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageFigures {
    pub prompt: Option<i64>,
    pub completion: Option<i64>,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached: Option<i64>,
    /// `prompt_tokens_details.cache_write_tokens`.
    pub cache_write: Option<i64>,
    /// `completion_tokens_details.reasoning_tokens`.
    pub reasoning: Option<i64>,
}

impl UsageFigures {
    /// The figures of a `usage` tree; None when it is not an object.
    pub fn of(usage: &Value) -> Option<UsageFigures> {
        let u = usage.as_object()?;
        let get = |k: &str| u.get(k).and_then(Value::as_i64);
        let detail = |group: &str, k: &str| u.get(group)?.get(k)?.as_i64();
        Some(UsageFigures {
            prompt: get("prompt_tokens"),
            completion: get("completion_tokens"),
            cached: detail("prompt_tokens_details", "cached_tokens"),
            cache_write: detail("prompt_tokens_details", "cache_write_tokens"),
            reasoning: detail("completion_tokens_details", "reasoning_tokens"),
        })
    }

    /// The figures of a `usage` member's JSON text, without a tree: Ok(None)
    /// when it is not an object; Err when the text is not one a tree reads
    /// the same (a key with escapes), for the caller's tree path.
    pub fn read(text: &str) -> Result<Option<UsageFigures>, serde_json::Error> {
        serde_json::from_str::<Read>(text).map(|r| r.0)
    }

    /// The tokens they give; None without a prompt or a completion figure.
    pub fn tokens(&self) -> Option<Tokens> {
        if self.prompt.is_none() && self.completion.is_none() {
            return None;
        }
        Some(Tokens {
            prompt: self.prompt.unwrap_or(0),
            completion: self.completion.unwrap_or(0),
            cache_read: self.cached.unwrap_or(0),
            cache_write: self.cache_write.unwrap_or(0),
            reasoning: self.reasoning.unwrap_or(0),
            estimated: false,
        })
    }
}

/// What [`UsageFigures::read`] reads: an object's figures, or nothing.
struct Read(Option<UsageFigures>);

/// A whole number as `as_i64` reads one; None for anything else.
struct Whole(Option<i64>);

/// A details object's members, by name (a later key wins, as in a tree).
struct Details(Vec<(&'static str, Option<i64>)>);

/// Reads anything: numbers that fit an `i64` give Some, the rest None.
struct WholeVisitor;

impl<'de> Visitor<'de> for WholeVisitor {
    type Value = Whole;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_i64<E>(self, v: i64) -> Result<Whole, E> {
        Ok(Whole(Some(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Whole, E> {
        Ok(Whole(i64::try_from(v).ok()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Whole, E> {
        Ok(Whole(None))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Whole, E> {
        Ok(Whole(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Whole, E> {
        Ok(Whole(None))
    }
    fn visit_unit<E>(self) -> Result<Whole, E> {
        Ok(Whole(None))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Whole, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Whole(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Whole, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Whole(None))
    }
}

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WholeVisitor)
    }
}

/// Reads a details object's `names` (anything else, or not an object: none).
fn details<'de, D: Deserializer<'de>>(
    d: D,
    names: &'static [&'static str],
) -> Result<Details, D::Error> {
    struct V(&'static [&'static str]);
    impl<'de> Visitor<'de> for V {
        type Value = Details;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Details, A::Error> {
            let mut out = Vec::new();
            while let Some(k) = map.next_key::<&'de str>()? {
                match self.0.iter().find(|n| **n == k) {
                    Some(n) => {
                        let Whole(v) = map.next_value()?;
                        out.retain(|(m, _)| m != n);
                        out.push((*n, v));
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Details(out))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Details, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Details(Vec::new()))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
        fn visit_u64<E>(self, _: u64) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
        fn visit_bool<E>(self, _: bool) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
        fn visit_str<E>(self, _: &str) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
        fn visit_unit<E>(self) -> Result<Details, E> {
            Ok(Details(Vec::new()))
        }
    }
    d.deserialize_any(V(names))
}

impl Details {
    fn get(&self, name: &str) -> Option<i64> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| *v)
    }
}

const PROMPT_DETAILS: &[&str] = &["cached_tokens", "cache_write_tokens"];
const COMPLETION_DETAILS: &[&str] = &["reasoning_tokens"];

struct PromptDetails(Details);
struct CompletionDetails(Details);

impl<'de> Deserialize<'de> for PromptDetails {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        details(d, PROMPT_DETAILS).map(PromptDetails)
    }
}

impl<'de> Deserialize<'de> for CompletionDetails {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        details(d, COMPLETION_DETAILS).map(CompletionDetails)
    }
}

impl<'de> Deserialize<'de> for Read {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Read;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
                // A later key wins, as in a tree.
                let mut f = UsageFigures::default();
                while let Some(k) = map.next_key::<&'de str>()? {
                    match k {
                        "prompt_tokens" => f.prompt = map.next_value::<Whole>()?.0,
                        "completion_tokens" => f.completion = map.next_value::<Whole>()?.0,
                        "prompt_tokens_details" => {
                            let PromptDetails(d) = map.next_value()?;
                            f.cached = d.get("cached_tokens");
                            f.cache_write = d.get("cache_write_tokens");
                        }
                        "completion_tokens_details" => {
                            let CompletionDetails(d) = map.next_value()?;
                            f.reasoning = d.get("reasoning_tokens");
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Read(Some(f)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Read, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Read(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Read, E> {
                Ok(Read(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Read, E> {
                Ok(Read(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Read, E> {
                Ok(Read(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Read, E> {
                Ok(Read(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Read, E> {
                Ok(Read(None))
            }
            fn visit_unit<E>(self) -> Result<Read, E> {
                Ok(Read(None))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn read_from_text_the_figures_are_those_of_the_tree() {
        let cases = [
            json!({"prompt_tokens": 30, "completion_tokens": 35, "total_tokens": 65}),
            json!({"prompt_tokens": 3, "completion_tokens": 1,
                   "prompt_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 1, "audio_tokens": 0},
                   "completion_tokens_details": {"reasoning_tokens": 7, "x": [1, {"a": 2}]}}),
            json!({"prompt_tokens": 1.5, "completion_tokens": "2", "prompt_tokens_details": null}),
            json!({"prompt_tokens": 18446744073709551615u64, "completion_tokens": -4,
                   "prompt_tokens_details": [1], "completion_tokens_details": 3}),
            json!({"total_tokens": 7}),
            json!({}),
            json!(null),
            json!(5),
            json!([1, 2]),
        ];
        for c in cases {
            let read = UsageFigures::read(&c.to_string()).unwrap();
            assert_eq!(read, UsageFigures::of(&c), "{c}");
            assert_eq!(
                read.and_then(|f| f.tokens()),
                UsageFigures::of(&c).and_then(|f| f.tokens())
            );
        }
        // A key written twice: the later one, as in a tree.
        let twice = r#"{"prompt_tokens": 1, "prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1, "cached_tokens": 3}}"#;
        let f = UsageFigures::read(twice).unwrap().unwrap();
        assert_eq!((f.prompt, f.cached), (Some(2), Some(3)));
        let tree: Value = serde_json::from_str(twice).unwrap();
        assert_eq!(Some(f), UsageFigures::of(&tree));
        // A key with escapes is for a tree.
        assert!(UsageFigures::read(r#"{"prompt\u005ftokens": 1}"#).is_err());
    }
}
