//! The figures of a chat `usage` object, read from a tree or typed from its
//! text (one rule for both): each is None when absent or not a whole number
//! that fits an `i64`, as a tree's `as_i64` reads it.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
        serde_json::from_str::<IfObject<UsageFigures>>(text).map(|r| r.0)
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

/// A whole number as `as_i64` reads one; None for anything else.
struct Whole(Option<i64>);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Whole, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Whole(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Whole, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Whole(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// What is read from an object's members.
trait FromMap<'de>: Sized {
    fn from_map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

/// An object read as `T`; anything else is read through and gives None
/// (a tree's `get` on a value that is not an object finds nothing).
struct IfObject<T>(Option<T>);

impl<'de, T: FromMap<'de>> Deserialize<'de> for IfObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: FromMap<'de>> Visitor<'de> for V<T> {
            type Value = IfObject<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<IfObject<T>, A::Error> {
                T::from_map(map).map(|t| IfObject(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IfObject<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IfObject(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
            fn visit_unit<E>(self) -> Result<IfObject<T>, E> {
                Ok(IfObject(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A details object's figures, by name (a later key wins, as in a tree).
#[derive(Default)]
struct Details {
    cached: Option<i64>,
    cache_write: Option<i64>,
    reasoning: Option<i64>,
}

impl<'de> FromMap<'de> for Details {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Details, A::Error> {
        let mut d = Details::default();
        while let Some(k) = map.next_key::<&'de str>()? {
            let slot = match k {
                "cached_tokens" => &mut d.cached,
                "cache_write_tokens" => &mut d.cache_write,
                "reasoning_tokens" => &mut d.reasoning,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value::<Whole>()?.0;
        }
        Ok(d)
    }
}

impl<'de> FromMap<'de> for UsageFigures {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<UsageFigures, A::Error> {
        // A later key wins, as in a tree.
        let mut f = UsageFigures::default();
        while let Some(k) = map.next_key::<&'de str>()? {
            match k {
                "prompt_tokens" => f.prompt = map.next_value::<Whole>()?.0,
                "completion_tokens" => f.completion = map.next_value::<Whole>()?.0,
                "prompt_tokens_details" => {
                    let d = map.next_value::<IfObject<Details>>()?.0.unwrap_or_default();
                    (f.cached, f.cache_write) = (d.cached, d.cache_write);
                }
                "completion_tokens_details" => {
                    let d = map.next_value::<IfObject<Details>>()?.0.unwrap_or_default();
                    f.reasoning = d.reasoning;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(f)
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
